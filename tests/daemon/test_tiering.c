// SPDX-License-Identifier: MIT
/*
 * test_tiering.c - kvarenad's KV tiers end to end (daemon/kvarenad/
 * tiering.c over daemon/tier/), without HTTP: real worker processes, the
 * real engine, a real arena (memfd on the host, kvarena.ko in a guest with
 * KVD_TEST_BACKEND=kernel), real spill files and io_uring.
 *
 * A conversation's reply ends in a client-side tool call (a scripted reply:
 * the random test model never calls tools; KVD_TEST_HOOKS), so the session
 * waits in TOOL_WAIT; the arena is kept under pressure (a high watermark
 * at its size) so the keep/spill/discard logic spills it (written behind:
 * the blocks stay), and the test then makes the arena need its memory
 * (kvd_make_room, as an allocation that does not fit would), which
 * evicts it at once. Then the tool result comes and decoding goes on.
 * Checked against a daemon that never evicts, token for token and
 * log-probability for log-probability (the top 20 of each step, bit for
 * bit):
 *
 *   spill_restore   spilled, evicted, restored on demand (a counted stall)
 *   prefetch        a tool class of known, fixed duration: the KV is back
 *                   before the result arrives (no stall)
 *   corrupt         a bit flipped in the spill file: detected, the verified
 *                   blocks kept, the rest recomputed; truncated likewise
 *   cap             a disk cap of two files: oldest first, never above it,
 *                   the evicted conversations recomputed
 *   overrun         a tool past its prediction is re-predicted (re-ranked),
 *                   and each new prediction passed again too, but counted
 *                   as one wait that overran
 *   killed          kvarenad SIGKILLed mid-spill: the next start removes
 *                   the stray file and serves correct output (and, over
 *                   kvarena.ko with KVD_TEST_BPF, loads its eBPF programs
 *                   again in place of the killed one's pins)
 *   decisions_off   [tier] decisions = no: kept until the kernel's ranking
 *                   evicts, then recomputed (no disk)
 *   make_room       the arena needs one conversation's blocks: one victim
 *                   is spilled, and while its write is in flight asking
 *                   again takes no other (room on its way counts); all
 *                   continue bit-identical
 *   prefetch_held   KV prefetched for a return that is due is no victim
 *                   for another's room while a job runs: no stall
 *   prefetch_taken  a prefetch takes no KV another prefetch brought back
 *   overrun_hold    a tool past its prediction whose return is due within
 *                   a restore's lead keeps its prefetched KV held
 *   overrun_prefetch prefetched KV taken after its tool overran is
 *                   prefetched again for the new prediction: no stall
 *   prefetch_first  a prefetch due that lacks room holds admission of
 *                   later conversations' turns while a job runs: the room
 *                   coming back is its own, no stall
 *   prefetch_slack  a prefetch due while turns come and go that would
 *                   fill the room it needs before the return is left to
 *                   the return: a no_slack stall, bit-identical; with
 *                   prefetch_slack = no the same prefetch goes
 *   room_census     a tool's result that finds its KV on disk, its
 *                   prefetch having found no room: a no_room stall, and
 *                   where the arena's blocks were (free, none idle and
 *                   back later); restored once the room is back
 *   prefetch_reserve a prefetch due while a job admitted now would run
 *                   (the measured hold) keeps its room: a later
 *                   conversation's turn that would take it waits while a
 *                   job runs; the prefetch finds room, no stall
 *   prefetch_order  a prefetch takes free room or that of conversations
 *                   expected back later, never of those back sooner: two
 *                   conversations returning first keep their KV, no stall
 *   restore_first   a restore on demand that finds no room holds
 *                   admission: a later short request does not pass it
 *   restore_shared  a restore that finds no room keeps its spill file
 *                   (and the shared prefix it attached), and is restored,
 *                   not recomputed, once the room is back
 *   lost_shared     a prefetch whose skipped shared blocks the cache
 *                   lost needs room for them too, and takes none of a
 *                   conversation due back sooner
 *   closed_mid_spill a victim whose session is closed while its spill is
 *                   written was no eviction (the KV never left for it)
 *   closed_mid_restore a session closed while its restore is in flight:
 *                   the read's blocks come back, nothing is left
 *   expire_tier     retention ending while a spill is written looks
 *                   again in 100 ms; with the KV on disk it frees the
 *                   blocks at once
 *   expire_miss     KV released when its retention ends (no disk) is no
 *                   eviction but counted, and its return is a miss
 *   discard_shares  a conversation whose KV the tier discarded shares
 *                   the prefix cache's blocks of its prompt on return
 *                   (its recomputed tokens: what it computed again)
 *   discard_waits   such a conversation returning to no room waits
 *                   holding nothing, not the cached blocks it attached
 *   timer_sleeps    a wait's overrun timer due within the poll's cap does
 *                   not make the scheduler spin until it fires
 *   shared_prefix   two agents on one long system prompt: only each one's
 *                   own blocks are written; restored from the cache and
 *                   the file, output identical
 *   idle1000        1000 conversations waiting on tools, their KV held:
 *                   the daemon's memory besides KV <= 256 KiB each
 *                   (unsanitized builds only: check-tiering runs it from
 *                   test_tiering_guest)
 *
 * usage: test_tiering MODEL WORKDIR   (KVD_TEST_ONLY=name,... runs some)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "log.h"
#include "test_hold.h"
#include "test_run.h"
#include "worker.h"

static int pass, failed;
static const char *model_path, *workdir;
static char self[PATH_MAX];

#define CHECK(cond, ...) do { \
	if (cond) { pass++; printf("ok   "); } \
	else { failed++; printf("FAIL %s:%d ", __FILE__, __LINE__); } \
	printf(__VA_ARGS__); printf("\n"); fflush(stdout); } while (0)

#define MAX_TOK 64
struct reply {
	char text[8192];
	size_t len;
	int32_t tokens[MAX_TOK];
	float lp[MAX_TOK];
	float top[MAX_TOK][20];
	int32_t top_tok[MAX_TOK][20];
	uint32_t n_tokens;
	struct kvd_usage usage;
	int error;
	char session[40];
};

static void msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static double now_ms(void)
{
	return (double)kvd_now_ns() / 1e6;
}

static char *new_dir(const char *tag)
{
	static int n;
	char *d;

	if (asprintf(&d, "%s/%s-%d-XXXXXX", workdir, tag, n++) < 0)
		return NULL;
	return mkdtemp(d);
}

static void rm_rf(const char *dir)
{
	char cmd[1200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		printf("(cleanup of %s failed)\n", dir);
}

static void base_config(struct kvd_config *c, const char *tier_dir)
{
	kvd_config_defaults(c);
	snprintf(c->model_path, sizeof(c->model_path), "%s", model_path);
	snprintf(c->model_id, sizeof(c->model_id), "test");
	snprintf(c->backend, sizeof(c->backend), "%s",
		 getenv("KVD_TEST_BACKEND") ? getenv("KVD_TEST_BACKEND") : "memfd");
	c->kv_blocks = 256;
	/* KVD_TEST_KV_DTYPE=q8_0: the same tests over an 8-bit KV (the
	 * references too) */
	if (getenv("KVD_TEST_KV_DTYPE"))
		snprintf(c->kv_dtype, sizeof(c->kv_dtype), "%s", getenv("KVD_TEST_KV_DTYPE"));
	c->toolwait_bpf = 0;
	c->log_level = getenv("KVD_TEST_VERBOSE") ? KVD_LOG_DEBUG : KVD_LOG_WARN;
	c->prefix_cache = 0;		/* each conversation's KV is its own */
	if (tier_dir)
		snprintf(c->tier_dir, sizeof(c->tier_dir), "%s", tier_dir);
}

/* The arena always "needs" memory: its high watermark at its size, so
 * every tool wait spills (applied as SIGHUP applies it). */
static void force_pressure(struct kvd *d)
{
	struct kvd_config nc;
	char err[256];

	pthread_mutex_lock(&d->lock);
	nc = d->cfg;
	nc.low_wm = 8;
	nc.high_wm = d->geom.blocks_total;
	if (kvd_tiering_reload(d, &nc, err, sizeof(err)))
		printf("reload: %s\n", err);
	pthread_mutex_unlock(&d->lock);
}

/* TCG guests are several times slower: tool times and margins scale. */
static int slow(int ms)
{
	const char *f = getenv("KVD_TEST_SLOW");

	return f ? ms * atoi(f) : ms;
}

/* Scripted replies a test left unused. */
static void stop(struct kvd *d)
{
	uint32_t i;

	pthread_mutex_lock(&d->lock);
	for (i = 0; i < d->n_test_replies; i++)
		free(d->test_replies[i]);
	d->n_test_replies = 0;
	pthread_mutex_unlock(&d->lock);
	kvd_destroy(d);
}

static struct kvd *start(const struct kvd_config *c)
{
	char err[512] = "";
	struct kvd *d = NULL;
	int i;

	if (kvd_create(c, self, &d, err, sizeof(err))) {
		printf("kvd_create: %s\n", err);
		return NULL;
	}
	for (i = 0; i < 3000 && !kvd_ready(d); i++)
		msleep(10);
	if (c->tier_dir[0])
		force_pressure(d);
	return d;
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

/* Waits until a metric reaches v (at most ms). */
static int await_metric(struct kvd *d, const char *name, uint64_t v, int ms)
{
	int i;

	for (i = 0; i < ms / 10; i++) {
		uint64_t x = metric(d, name);

		if (x != UINT64_MAX && x >= v)
			return 1;
		msleep(10);
	}
	return 0;
}

/* The arena needs its memory: victims by the kernel's ranking, as an
 * allocation that does not fit would have them (a spill written behind at
 * the tool wait makes the eviction free). */
static void demand(struct kvd *d)
{
	pthread_mutex_lock(&d->lock);
	kvd_make_room(d, d->geom.blocks_total);
	pthread_mutex_unlock(&d->lock);
}

/* The next round's reply in place of the model's (KVD_TEST_HOOKS). */
static void script(struct kvd *d, const char *reply)
{
	pthread_mutex_lock(&d->lock);
	d->test_replies[d->n_test_replies++] = strdup(reply);
	pthread_mutex_unlock(&d->lock);
}

/* A request as every test sends it (greedy, seeded, the top 20
 * log-probabilities); its events are read by collect(). NULL: refused. */
static struct kvd_job *submit(struct kvd *d, const char *prompt, uint32_t max_tokens)
{
	struct kvd_request rq = { 0 };
	struct kvd_error err;
	struct kvd_job *j;

	rq.model = "test";
	rq.prompt = prompt;
	rq.prompt_len = strlen(prompt);
	rq.s.temperature = 0;
	rq.s.top_p = 1;
	rq.s.seed = 1;
	rq.s.has_seed = 1;
	rq.s.max_tokens = max_tokens;
	rq.s.logprobs = 1;
	rq.s.top_logprobs = 20;
	if (kvd_job_submit(d, &rq, &j, &err)) {
		printf("submit: %s\n", err.message);
		return NULL;
	}
	return j;
}

/* The job's reply, to its end; the job is freed. */
static int collect(struct kvd_job *j, struct reply *r)
{
	struct kvd_event ev;

	while (kvd_job_next(j, &ev, 120000) == 1) {
		if (ev.type == KVD_EV_TOKEN) {
			if (ev.token >= 0 && r->n_tokens < MAX_TOK) {
				uint32_t k = r->n_tokens++, i;

				r->tokens[k] = ev.token;
				r->lp[k] = ev.logprob;
				for (i = 0; i < ev.n_top && i < 20; i++) {
					r->top[k][i] = ev.top[i].logprob;
					r->top_tok[k][i] = ev.top[i].token;
				}
			}
			if (r->len + ev.text_len < sizeof(r->text)) {
				memcpy(r->text + r->len, ev.text, ev.text_len);
				r->len += ev.text_len;
			}
		} else if (ev.type == KVD_EV_DONE) {
			r->usage = ev.usage;
			snprintf(r->session, sizeof(r->session), "%s", ev.session_id);
			break;
		} else {
			printf("error event: %s\n", ev.err.message);
			r->error = 1;
			break;
		}
	}
	kvd_job_free(j);
	return r->error ? -1 : 0;
}

static int ask(struct kvd *d, const char *prompt, uint32_t max_tokens, struct reply *r)
{
	struct kvd_job *j;

	memset(r, 0, sizeof(*r));
	j = submit(d, prompt, max_tokens);
	if (!j) {
		r->error = 1;
		return -1;
	}
	return collect(j, r);
}

/* Same tokens, same log-probabilities (bit for bit, the top 20 too). */
static int same_reply(const struct reply *a, const struct reply *b)
{
	return a->n_tokens == b->n_tokens && a->n_tokens > 0 &&
	       !memcmp(a->tokens, b->tokens, a->n_tokens * sizeof(a->tokens[0])) &&
	       !memcmp(a->lp, b->lp, a->n_tokens * sizeof(a->lp[0])) &&
	       !memcmp(a->top, b->top, sizeof(a->top)) &&
	       !memcmp(a->top_tok, b->top_tok, sizeof(a->top_tok));
}

/* A conversation: a long user turn, a reply calling `tool`, its result. */
struct convo {
	char p1[8192];		/* the first request */
	char call[256];		/* the scripted reply: the tool call */
	char p2[16384];		/* the request bringing the result */
};

/* One of `lines` lines of log: ~3 blocks of KV a line (the test model's
 * 512-token vocabulary). */
static void make_convo_n(struct convo *cv, int k, const char *tool, int lines)
{
	char body[6000];
	size_t n = 0;
	int i;

	for (i = 0; i < lines && n + 120 < sizeof(body); i++)
		n += (size_t)snprintf(body + n, sizeof(body) - n,
				      "line %d of conversation %d: the build log says step %d "
				      "passed in %d ms. ", i, k, i * 3 + k, (i * 37 + k * 11) % 997);
	snprintf(cv->p1, sizeof(cv->p1), "<|im_start|>system\nYou are agent %d.<|im_end|>\n"
		 "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", k, body);
	snprintf(cv->call, sizeof(cv->call),
		 "<tool_call>\n{\"name\": \"%s\", \"arguments\": {\"n\": %d}}\n</tool_call>",
		 tool, k);
	snprintf(cv->p2, sizeof(cv->p2), "%s%s<|im_end|>\n<|im_start|>tool\n<tool_response>\n"
		 "result %d: 42 files, 3 failures<|im_end|>\n<|im_start|>assistant\n", cv->p1,
		 cv->call, k);
}

/* ~30 blocks of KV */
static void make_convo(struct convo *cv, int k, const char *tool)
{
	make_convo_n(cv, k, tool, 10);
}

/* The references: the same two requests of every conversation the tests
 * use, on one daemon that never evicts. */
static const char *const ref_tool[8] = { "run_tests", "compile", "grep", "quick_read",
					 "lint", "lint", "lint", "lint" };
static struct reply refs[8];
static int have_ref[8], refs_done;
static uint32_t ref_block_size, ref_block_tokens;

static const struct reply *reference(int k)
{
	struct kvd_config c;
	struct convo cv;
	struct reply r1;
	struct kvd *d;
	int i, ok = 1;

	if (refs_done)
		return have_ref[k] ? &refs[k] : NULL;
	refs_done = 1;
	base_config(&c, NULL);
	c.kv_blocks = 2048;
	d = start(&c);
	if (!d)
		return NULL;
	ref_block_size = d->geom.block_size;
	ref_block_tokens = d->geom.block_tokens;
	for (i = 0; i < 8; i++) {
		make_convo(&cv, i, ref_tool[i]);
		script(d, cv.call);
		if (!ask(d, cv.p1, 8, &r1) && !ask(d, cv.p2, 24, &refs[i]) &&
		    refs[i].usage.cached_tokens > 0)
			have_ref[i] = 1;
		ok &= have_ref[i];
	}
	CHECK(ok && metric(d, "kvarenad_evictions_total") == 0,
	      "references: 8 conversations on a daemon that never evicts; each tool result "
	      "continues its session's KV (e.g. %u of %u prompt tokens cached)",
	      refs[0].usage.cached_tokens, refs[0].usage.prompt_tokens);
	stop(d);
	return have_ref[k] ? &refs[k] : NULL;
}

static int count_files(const char *dir, const char *suffix, uint64_t *bytes)
{
	DIR *dd = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (bytes)
		*bytes = 0;
	while (dd && (de = readdir(dd))) {
		size_t l = strlen(de->d_name), s = strlen(suffix);
		struct stat sb;
		char p[1200];

		if (l < s || strcmp(de->d_name + l - s, suffix))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (bytes && stat(p, &sb) == 0)
			*bytes += (uint64_t)sb.st_size;
		n++;
	}
	if (dd)
		closedir(dd);
	return n;
}

static char *first_file(const char *dir)
{
	DIR *dd = opendir(dir);
	struct dirent *de;
	char *r = NULL;

	while (dd && (de = readdir(dd)))
		if (strstr(de->d_name, ".kvspill") && de->d_name[0] != '.' && !r)
			if (asprintf(&r, "%s/%s", dir, de->d_name) < 0)
				r = NULL;
	if (dd)
		closedir(dd);
	return r;
}

static const char *tier_of(struct kvd *d, const char *session)
{
	const char *t = "?";
	struct kvd_conv *c;

	pthread_mutex_lock(&d->lock);
	c = kvd_conv_find_id(d, session);
	if (c)
		t = kvd_tiering_tier(c);
	pthread_mutex_unlock(&d->lock);
	return t;
}

/*
 * What the arena (the kernel's session, or the memfd backend's) says of
 * the conversation's kvarena session, once it says tier (or, with tier
 * UINT32_MAX, anything): the daemon tells it with the step's state
 * changes. 0, or -1 when it never did within ms.
 */
static int await_ktier(struct kvd *d, const char *session, uint32_t tier, int ms,
		       struct kva_session_info *si)
{
	int i, rc = -1;

	for (i = 0; i < ms / 10 && rc; i++) {
		struct kvd_conv *c;

		if (i)
			msleep(10);
		pthread_mutex_lock(&d->lock);
		c = kvd_conv_find_id(d, session);
		memset(si, 0, sizeof(*si));
		si->size = sizeof(*si);
		if (c && c->has_kv && !kva_session_get_info(d->arena, c->as.sid, si) &&
		    (tier == UINT32_MAX || si->tier == tier))
			rc = 0;
		pthread_mutex_unlock(&d->lock);
	}
	return rc;
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_spill_restore(void)
{
	const struct reply *ref = reference(0);
	char *dir = new_dir("spill");
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2;
	struct kvd *d;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 0, "run_tests");
	base_config(&c, dir);
	c.tier_prefetch = 0;		/* on demand: the return restores it */
	d = start(&c);
	CHECK(d != NULL, "kvarenad starts with a disk tier in %s (%s backend)", dir,
	      d && d->backend == KVA_BACKEND_KERNEL ? "kernel" : "memfd");
	if (!d)
		goto out;
	script(d, cv.call);
	CHECK(ask(d, cv.p1, 8, &r1) == 0, "the reply ends in a client-side tool call");
	CHECK(await_metric(d, "kvarenad_tier_spills_total", 1, 20000),
	      "the tool wait under pressure spills the session's KV (decision: spill)");
	CHECK(metric(d, "kvarenad_tier_decisions_total{choice=\"spill\"}") == 1,
	      "one spill decision counted");
	CHECK(!strcmp(tier_of(d, r1.session), "arena"),
	      "written behind: its blocks stay until the arena needs them (tier %s)",
	      tier_of(d, r1.session));
	demand(d);
	CHECK(!strcmp(tier_of(d, r1.session), "disk") && count_files(dir, ".kvspill", NULL) == 1 &&
	      metric(d, "kvarenad_tier_spills_clean_total") == 1 &&
	      metric(d, "kvarenad_evictions_total") == 1,
	      "the arena needs them: evicted at once, no write (a clean copy); the session's KV "
	      "is on disk (tier %s, one spill file)", tier_of(d, r1.session));
	{
		struct kva_session_info si;

		CHECK(await_ktier(d, r1.session, KVA_TIER_DISK, 5000, &si) == 0 &&
		      si.state == KVA_STATE_TOOL_WAIT && si.blocks_held == 0,
		      "the arena's session says so too (kvactl session list): tier %u (disk %u), "
		      "%s, %u blocks", si.tier, KVA_TIER_DISK, kva_state_name(si.state),
		      si.blocks_held);
	}
	CHECK(ask(d, cv.p2, 24, &r2) == 0, "the tool result continues the conversation");
	CHECK(same_reply(&r2, ref),
	      "spilled then restored: tokens and log-probabilities (top 20) bit-identical to "
	      "the run without eviction (%u tokens)", r2.n_tokens);
	CHECK(r2.usage.cached_tokens == ref->usage.cached_tokens,
	      "the restored KV counts as cached: %u tokens (reference %u)",
	      r2.usage.cached_tokens, ref->usage.cached_tokens);
	CHECK(metric(d, "kvarenad_tier_restores_total") == 1 &&
	      metric(d, "kvarenad_tier_restore_stalls_total") == 1,
	      "one restore, on demand: a counted stall (%llu ms total)",
	      (unsigned long long)metric(d, "kvarenad_tier_restore_stall_ms_sum"));
	CHECK(r1.usage.restored_tokens == 0 && r1.usage.restore_stall_ms == 0 &&
	      r2.usage.restored_tokens == r2.usage.cached_tokens && r2.usage.restored_tokens &&
	      r2.usage.restore_stall_ms > 0 &&
	      r2.usage.restore_stall_ms <= metric(d, "kvarenad_tier_restore_stall_ms_sum") + 1,
	      "the turn's usage says so: %u of its %u cached tokens restored, after a %u ms "
	      "stall (the first turn: %u, %u ms)", r2.usage.restored_tokens,
	      r2.usage.cached_tokens, r2.usage.restore_stall_ms, r1.usage.restored_tokens,
	      r1.usage.restore_stall_ms);
	CHECK(metric(d, "kvarenad_tier_recomputed_tokens_total") == 0, "nothing recomputed");
	{
		struct kva_session_info si;

		CHECK(await_ktier(d, r2.session, KVA_TIER_ARENA, 5000, &si) == 0,
		      "restored: the arena's session back in tier arena (%u)", si.tier);
	}
	stop(d);
	CHECK(count_files(dir, ".kvspill", NULL) == 0, "no spill file left after stop");
out:
	rm_rf(dir);
	free(dir);
}

/* A tool class whose waits the daemon has measured: always ~700 ms. */
static void train_class(struct kvd *d, const char *tool, uint64_t us)
{
	uint32_t cls, i;

	pthread_mutex_lock(&d->lock);
	cls = kvd_toolclass(d, 0, tool, strlen(tool));
	for (i = 0; i < 16; i++)
		kvd_toolwait_record(d, cls, us);
	pthread_mutex_unlock(&d->lock);
}

/*
 * A tool class the daemon has never measured is predicted from every
 * tool's measured waits, not at the predictor's 1 s cold start, and its
 * own waits take over as they come: here the daemon's tools all take
 * ~200 ms, so a new one is predicted at ~200 ms (it was 1000 ms: a tier
 * deciding on a quick new tool as if it took a second, or on a slow one as
 * if it took a second).
 */
static void test_new_class(void)
{
	char *dir = new_dir("newclass");
	struct kvd_config c;
	struct kvd *d;
	uint64_t p0, p1, p8;
	uint32_t cls, i;

	if (!dir)
		return;
	base_config(&c, dir);
	d = start(&c);
	if (!d)
		goto out;
	pthread_mutex_lock(&d->lock);
	cls = kvd_toolclass(d, 0, "fresh", 5);
	p0 = kvd_toolwait_predict_us(d, cls);
	pthread_mutex_unlock(&d->lock);
	train_class(d, "read", 200000);
	train_class(d, "ls", 150000);
	pthread_mutex_lock(&d->lock);
	p1 = kvd_toolwait_predict_us(d, cls);
	for (i = 0; i < 8; i++)
		kvd_toolwait_record(d, cls, 6000000);
	p8 = kvd_toolwait_predict_us(d, cls);
	pthread_mutex_unlock(&d->lock);
	CHECK(p0 == 1000000, "with nothing measured, a new tool is the cold start (%.2f s)",
	      p0 / 1e6);
	CHECK(p1 >= 150000 && p1 <= 200000,
	      "with every tool measured at 150-200 ms, a new one is predicted from them "
	      "(%.3f s, not 1 s)", p1 / 1e6);
	CHECK(p8 >= 5900000 && p8 <= 6100000,
	      "after 8 waits of its own (6 s), its own (%.2f s)", p8 / 1e6);
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/* Pressure that one block more free would end: the high watermark just
 * above the free blocks. */
static void slight_pressure(struct kvd *d)
{
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct kvd_config nc;
	char err[256];

	pthread_mutex_lock(&d->lock);
	nc = d->cfg;
	if (kva_arena_get_info(d->arena, &ai) == 0) {
		nc.low_wm = 1;
		nc.high_wm = ai.blocks_free + 1;
	}
	if (kvd_tiering_reload(d, &nc, err, sizeof(err)))
		printf("reload: %s\n", err);
	pthread_mutex_unlock(&d->lock);
}

/*
 * Spills are lazy: a tool wait under pressure decided "spill" writes
 * nothing while the arena has other idle KV to give for its shortfall
 * (here its own KV's size, idle conversations holding twice that); the eviction that
 * takes its blocks writes it, and it is restored bit-identical. (Every
 * spill decision wrote ahead before: disk bandwidth and cap spent on
 * sessions the arena never evicted.)
 */
static void test_lazy_spill(void)
{
	const struct reply *ref = reference(1);
	char *dir = new_dir("lazy");
	struct kvd_config c;
	struct convo idle, idle2, cv;
	struct reply r0, r1, r2;
	struct kvd *d;
	int i;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&idle, 3, "lint");
	make_convo(&idle2, 4, "lint");
	make_convo(&cv, 1, "compile");
	base_config(&c, dir);
	c.tier_prefetch = 0;
	d = start(&c);
	if (!d)
		goto out;
	train_class(d, "compile", 20000000);	/* a wait any spill pays for */
	/* two idle conversations hold ~60 blocks; the call's own KV (~30)
	 * is what the pressure lacks when its tool wait is decided */
	CHECK(ask(d, idle.p1, 8, &r0) == 0 && ask(d, idle2.p1, 8, &r0) == 0,
	      "idle conversations hold KV");
	slight_pressure(d);
	script(d, cv.call);
	CHECK(ask(d, cv.p1, 8, &r1) == 0, "a call to a tool of ~20 s under slight pressure");
	msleep(300);
	CHECK(metric(d, "kvarenad_tier_decisions_total{choice=\"spill\"}") == 1 &&
	      metric(d, "kvarenad_tier_spills_deferred_total") == 1 &&
	      metric(d, "kvarenad_tier_spills_total") == 0 && count_files(dir, ".kvspill", NULL) == 0,
	      "decided spill, written lazily: nothing on disk while the arena has other idle KV "
	      "(%llu spills, %llu deferred)",
	      (unsigned long long)metric(d, "kvarenad_tier_spills_total"),
	      (unsigned long long)metric(d, "kvarenad_tier_spills_deferred_total"));
	demand(d);
	for (i = 0; i < 2000 && strcmp(tier_of(d, r1.session), "disk"); i++)
		msleep(10);
	CHECK(metric(d, "kvarenad_tier_spills_total") >= 1 && !strcmp(tier_of(d, r1.session), "disk"),
	      "the eviction writes it, then frees its blocks (tier %s)", tier_of(d, r1.session));
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref),
	      "restored from the lazily written spill: bit-identical to the run without eviction");
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

static void test_prefetch(void)
{
	const struct reply *ref = reference(1);
	char *dir = new_dir("prefetch");
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2;
	double t0, back_at = 0;
	struct kvd *d;
	int i, tool_ms;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 1, "compile");
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(250);	/* a loaded machine's scheduler */
	d = start(&c);
	if (!d)
		goto out;
	tool_ms = slow(1200);
	train_class(d, "compile", (uint64_t)tool_ms * 1000);
	script(d, cv.call);
	CHECK(ask(d, cv.p1, 8, &r1) == 0, "a call to a tool that always takes %d ms", tool_ms);
	t0 = now_ms();
	CHECK(await_metric(d, "kvarenad_tier_spills_total", 1, tool_ms / 2),
	      "written to disk while the tool runs (after %.0f ms)", now_ms() - t0);
	demand(d);
	CHECK(!strcmp(tier_of(d, r1.session), "disk"), "evicted: its KV is on disk only");
	/* the tool "runs" its time; the KV comes back before */
	for (i = 0; i < 100000; i++) {
		if (!back_at && !strcmp(tier_of(d, r1.session), "arena") &&
		    metric(d, "kvarenad_tier_restores_total") == 1)
			back_at = now_ms() - t0;
		if (now_ms() - t0 >= tool_ms)
			break;
		msleep(10);
	}
	CHECK(back_at > 0 && metric(d, "kvarenad_tier_prefetches_total") == 1,
	      "prefetched: back in the arena %.0f ms into the %d ms wait", back_at, tool_ms);
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref),
	      "the result arrives after %d ms: output bit-identical to the run without "
	      "eviction", tool_ms);
	CHECK(metric(d, "kvarenad_tier_restore_stalls_total") == 0,
	      "no restore stall: the KV was there when the tool returned");
	CHECK(r2.usage.restored_tokens == r2.usage.cached_tokens && r2.usage.restored_tokens &&
	      r2.usage.restore_stall_ms == 0,
	      "the turn's usage: %u of its %u cached tokens restored (prefetched), no stall "
	      "(%u ms)", r2.usage.restored_tokens, r2.usage.cached_tokens,
	      r2.usage.restore_stall_ms);
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

static void corrupt_case(int truncate_it)
{
	const struct reply *ref = reference(2);
	char *dir = new_dir(truncate_it ? "trunc" : "corrupt"), *path;
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2;
	struct kvd *d;
	int fd;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 2, "grep");
	base_config(&c, dir);
	c.tier_prefetch = 0;
	d = start(&c);
	if (!d)
		goto out;
	script(d, cv.call);
	ask(d, cv.p1, 8, &r1);
	await_metric(d, "kvarenad_tier_spills_total", 1, 20000);
	demand(d);
	path = first_file(dir);
	CHECK(path != NULL, "a spill file to damage");
	if (!path) {
		stop(d);
		goto out;
	}
	fd = open(path, O_RDWR);
	if (truncate_it) {
		/* 4 KiB header and 2.5 blocks: two blocks come back */
		CHECK(fd >= 0 && ftruncate(fd, 4096 + 5 * (off_t)d->geom.block_size / 2) == 0,
		      "spill file truncated after 2.5 blocks");
	} else {
		uint8_t b = 0;
		off_t off = 4096 + 3 * (off_t)d->geom.block_size + 100;

		CHECK(fd >= 0 && pread(fd, &b, 1, off) == 1 && (b ^= 1, pwrite(fd, &b, 1, off) == 1),
		      "one bit flipped in block 3 of the spill file");
	}
	if (fd >= 0)
		close(fd);
	free(path);
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref),
	      "%s file detected, the session recomputed: output bit-identical to the run "
	      "without eviction", truncate_it ? "truncated" : "corrupted");
	CHECK(metric(d, truncate_it ? "kvarenad_tier_restore_failures_total{reason=\"truncated\"}" :
				      "kvarenad_tier_restore_failures_total{reason=\"checksum\"}") == 1,
	      "the metrics say why (%s)", truncate_it ? "truncated" : "checksum");
	{
		uint64_t rt = metric(d, "kvarenad_tier_recomputed_tokens_total");
		uint32_t bt = d->geom.block_tokens, kept = (truncate_it ? 2 : 3) * bt;

		CHECK(rt > 0 && rt + kept + 1 >= r1.usage.prompt_tokens &&
		      r2.usage.cached_tokens == kept,
		      "the verified blocks kept (%u tokens cached), the rest recomputed (%llu tokens)",
		      r2.usage.cached_tokens, (unsigned long long)rt);
	}
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

static void test_corrupt(void)
{
	corrupt_case(0);
	corrupt_case(1);
}

/* Positions with KV after the first request: what the tool wait spills. */
static uint32_t r_tokens(const struct reply *ref)
{
	return ref->usage.cached_tokens;
}

static void test_cap(void)
{
	char *dir = new_dir("cap");
	struct kvd_config c;
	struct convo cv[4];
	struct reply r1[4], r2;
	uint64_t bytes, cap;
	struct kvd *d;
	int i, same = 1, max_files = 0;

	if (!dir)
		return;
	for (i = 0; i < 4; i++) {
		if (!reference(4 + i))
			goto out;
		make_convo(&cv[i], 4 + i, "lint");
	}
	/* room for two files of this size: a 4 KiB header and the blocks of
	 * the first request's KV */
	bytes = 4096 + (uint64_t)(r_tokens(&refs[4]) + ref_block_tokens - 1) / ref_block_tokens *
		       ref_block_size;
	cap = (2 * bytes + (1 << 20) - 1) >> 20;
	base_config(&c, dir);
	c.tier_prefetch = 0;
	c.tier_cap_mb = cap;
	d = start(&c);
	if (!d)
		goto out;
	for (i = 0; i < 4; i++) {
		uint64_t b;
		int n;

		script(d, cv[i].call);
		ask(d, cv[i].p1, 8, &r1[i]);
		await_metric(d, "kvarenad_tier_spills_total", (uint64_t)i + 1, 20000);
		demand(d);
		msleep(50);
		n = count_files(dir, ".kvspill", &b);
		if (n > max_files)
			max_files = n;
		CHECK(b <= cap << 20, "after %d spills: %d files, %llu bytes on disk, cap %llu MiB",
		      i + 1, n, (unsigned long long)b, (unsigned long long)cap);
	}
	CHECK(metric(d, "kvarenad_tier_disk_evictions_total") >= 2 && max_files <= 2,
	      "the oldest files went first (%llu removed by the cap)",
	      (unsigned long long)metric(d, "kvarenad_tier_disk_evictions_total"));
	CHECK(!strcmp(tier_of(d, r1[0].session), "none") && !strcmp(tier_of(d, r1[3].session), "disk"),
	      "the first conversation's KV is gone (%s), the last one's on disk (%s)",
	      tier_of(d, r1[0].session), tier_of(d, r1[3].session));
	for (i = 0; i < 4; i++) {
		if (ask(d, cv[i].p2, 24, &r2) || !same_reply(&r2, &refs[4 + i]))
			same = 0;
	}
	CHECK(same, "all four continue with output bit-identical to the run without eviction "
	      "(recomputed or restored)");
	CHECK(metric(d, "kvarenad_tier_recomputed_tokens_total") > 0 &&
	      metric(d, "kvarenad_tier_restores_total") >= 1,
	      "%llu tokens recomputed, %llu restores",
	      (unsigned long long)metric(d, "kvarenad_tier_recomputed_tokens_total"),
	      (unsigned long long)metric(d, "kvarenad_tier_restores_total"));
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

static void test_overrun(void)
{
	char *dir = new_dir("overrun");
	struct kvd_config c;
	struct convo cv;
	struct reply r1;
	struct kvd *d;
	uint64_t pred0 = 0, pred1 = 0;
	struct kva_session_info si0 = { 0 };
	struct kvd_conv *cc;

	if (!dir)
		return;
	make_convo(&cv, 3, "quick_read");
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(50);
	d = start(&c);
	if (!d)
		goto out;
	train_class(d, "quick_read", (uint64_t)slow(200) * 1000);
	script(d, cv.call);
	ask(d, cv.p1, 8, &r1);
	pthread_mutex_lock(&d->lock);
	cc = kvd_conv_find_id(d, r1.session);
	if (cc)
		pred0 = cc->tool_pred_us;
	pthread_mutex_unlock(&d->lock);
	CHECK(pred0 >= (uint64_t)slow(200) * 1000 && pred0 < (uint64_t)slow(210) * 1000,
	      "predicted wait of the trained class: %.0f ms", (double)pred0 / 1e3);
	{
		int i;

		for (i = 0; i < 200; i++) {
			if (!await_ktier(d, r1.session, UINT32_MAX, 10, &si0) &&
			    si0.state == KVA_STATE_TOOL_WAIT)
				break;
			msleep(10);
		}
	}
	CHECK(await_metric(d, "kvarenad_tool_overruns_total", 1, slow(2000)),
	      "the tool outlives its prediction: an overrun");
	pthread_mutex_lock(&d->lock);
	cc = kvd_conv_find_id(d, r1.session);
	if (cc)
		pred1 = cc->tool_pred_us;
	pthread_mutex_unlock(&d->lock);
	CHECK(pred1 > pred0, "re-ranked: the expected wait grows from %.0f to %.0f ms",
	      (double)pred0 / 1e3, (double)pred1 / 1e3);
	{	/* the kernel's toolwait ranking hears it, the wait goes on */
		struct kva_session_info si;
		int i, ok = 0;

		for (i = 0; i < 500 && !ok; i++) {
			if (i)
				msleep(10);
			ok = await_ktier(d, r1.session, UINT32_MAX, 10, &si) == 0 &&
			     si.expected_wait_us >= pred1;
		}
		CHECK(ok && si.state == KVA_STATE_TOOL_WAIT && si.expected_wait_us >= pred1 &&
		      si0.state == KVA_STATE_TOOL_WAIT && si.transitions == si0.transitions &&
		      si.state_since_ns == si0.state_since_ns,
		      "the arena's session has the new prediction (%.0f ms, was %.0f) without a "
		      "transition (%s since the same instant, %llu transitions before and after)",
		      (double)si.expected_wait_us / 1e3, (double)si0.expected_wait_us / 1e3,
		      kva_state_name(si.state), (unsigned long long)si.transitions);
	}
	/* 200 ms a wait trained: passed at 250, predicted anew within the
	 * histogram's slot (to 262 ms), passed again, then past every wait
	 * recorded (as long again): three predictions of one wait. Counted
	 * per prediction, a pilot's 148 waits that overran read as 261 */
	CHECK(await_metric(d, "kvarenad_tool_repredictions_total", 3, slow(3000)) &&
	      metric(d, "kvarenad_tool_overruns_total") == 1,
	      "one wait past its prediction: %llu overrun, predicted anew %llu times",
	      (unsigned long long)metric(d, "kvarenad_tool_overruns_total"),
	      (unsigned long long)metric(d, "kvarenad_tool_repredictions_total"));
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/* kvarenad killed (SIGKILL, its workers with it) while a spill is being
 * written; the next start cleans the directory and serves correctly. Over
 * kvarena.ko with KVD_TEST_BPF set (bpffs mounted), both starts load the eBPF tool-wait
 * programs: the killed one's pins are left behind, and the next start
 * must replace them rather than run without its programs. */
static void test_killed(void)
{
	const struct reply *ref = reference(0);
	char *dir = new_dir("killed");
	const char *be = getenv("KVD_TEST_BACKEND");
	int bpf = be && !strcmp(be, "kernel") && getenv("KVD_TEST_BPF");
	struct kvd_config c;
	struct convo cv;
	struct reply r2;
	int st, i, seen = 0;
	struct kvd *d;
	pid_t pid;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 0, "run_tests");
	pid = fork();
	if (pid == 0) {
		struct reply r1;

		base_config(&c, dir);
		/* one block at a time: the spill stays in flight longer */
		c.tier_queue_depth = 1;
		c.toolwait_bpf = bpf;
		d = start(&c);
		if (!d || (bpf && !d->tw))
			_exit(3);
		script(d, cv.call);
		ask(d, cv.p1, 8, &r1);
		pause();
		_exit(0);
	}
	/* kill as soon as a spill file appears (being written, or just done) */
	for (i = 0; i < 6000 && !seen; i++) {
		seen = count_files(dir, ".kvspill", NULL);
		if (!seen)
			msleep(1);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	CHECK(seen && WIFSIGNALED(st), "kvarenad SIGKILLed with a spill file in %s", dir);
	msleep(300);	/* its workers follow it (PR_SET_PDEATHSIG) */
	base_config(&c, dir);
	c.toolwait_bpf = bpf;
	d = start(&c);
	CHECK(d && count_files(dir, ".kvspill", NULL) == 0,
	      "restarted: the start-up clean removed the stray spill file");
	if (bpf)
		CHECK(d && d->tw, "restarted: the eBPF tool-wait programs loaded again, the killed "
		      "daemon's pins replaced");
	if (d) {
		CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref),
		      "the conversation's next request: recomputed, output bit-identical to the "
		      "run without eviction (no KV of the dead process served)");
		stop(d);
	}
	CHECK(count_files(dir, ".kvspill", NULL) == 0, "no stray files after the second run");
	rm_rf(dir);
	free(dir);
}

static void test_decisions_off(void)
{
	const struct reply *ref = reference(0);
	char *dir = new_dir("off");
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2;
	struct kvd *d;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 0, "run_tests");
	base_config(&c, dir);
	c.tier_decisions = 0;
	d = start(&c);
	if (!d)
		goto out;
	script(d, cv.call);
	ask(d, cv.p1, 8, &r1);
	msleep(300);
	CHECK(metric(d, "kvarenad_tier_spills_total") == 0 && !strcmp(tier_of(d, r1.session), "arena"),
	      "decisions off: the tool wait keeps the KV in the arena (tier %s)",
	      tier_of(d, r1.session));
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref) &&
	      r2.usage.cached_tokens == ref->usage.cached_tokens,
	      "and the result continues it: output bit-identical");
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * Three conversations wait on tools with their KV kept (no pressure at
 * their tool waits: nothing written behind). The arena needs room for one
 * block more than is free: one victim is enough, and it is spilled (its
 * blocks free when written). Its completion is reaped only under the
 * daemon's lock, which the test holds, so the write is in flight for
 * certain while the arena is asked again: the blocks on their way count,
 * no second victim is taken. (Before, every victim ranked was spilled in
 * the first call: a free count that a write in flight has not raised yet
 * made each look insufficient.)
 */
static void test_make_room(void)
{
	const struct reply *ref = reference(0);
	char *dir = new_dir("room");
	struct kvd_config c, nc;
	struct convo cv[3];
	struct reply r1[3], r2;
	uint64_t ev0, ev1, ev2;
	uint32_t freeing, freeing2, k, ok = 0;
	char err[256];
	struct kvd *d;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	base_config(&c, dir);
	c.tier_prefetch = 0;
	d = start(&c);
	if (!d)
		goto out;
	/* no pressure: every tool wait keeps its KV (start() forced it) */
	pthread_mutex_lock(&d->lock);
	nc = d->cfg;
	nc.low_wm = 1;
	nc.high_wm = 2;
	if (kvd_tiering_reload(d, &nc, err, sizeof(err)))
		printf("reload: %s\n", err);
	pthread_mutex_unlock(&d->lock);
	for (k = 0; k < 3; k++) {
		/* tools known to take a minute: the KV is retained through
		 * the test (a retention deadline from the predicted wait
		 * would otherwise spill it on a slow machine) */
		train_class(d, ref_tool[k], 60000000);
		make_convo(&cv[k], (int)k, ref_tool[k]);
		script(d, cv[k].call);
		ask(d, cv[k].p1, 8, &r1[k]);
	}
	CHECK(await_metric(d, "kvarenad_tier_decisions_total{choice=\"keep\"}", 3, 20000) &&
	      metric(d, "kvarenad_tier_spills_total") == 0,
	      "three conversations wait on tools, their KV kept in the arena (no pressure)");
	pthread_mutex_lock(&d->lock);
	ev0 = d->m.evictions;
	kvd_make_room(d, kvd_blocks_free(d) + 1);
	ev1 = d->m.evictions;
	freeing = kvd_tiering_freeing(d);
	kvd_make_room(d, kvd_blocks_free(d) + 1);
	ev2 = d->m.evictions;
	freeing2 = kvd_tiering_freeing(d);
	pthread_mutex_unlock(&d->lock);
	CHECK(ev1 == ev0 && freeing > 0,
	      "the arena needs one block more than is free: one victim, being spilled, %u "
	      "blocks on their way (not an eviction before they leave: %llu)", freeing,
	      (unsigned long long)(ev1 - ev0));
	CHECK(ev2 == ev1 && freeing2 == freeing,
	      "asked again while that write is in flight: no other victim taken (%u blocks on "
	      "their way)", freeing2);
	CHECK(await_metric(d, "kvarenad_tier_spills_total", 1, 20000) &&
	      await_metric(d, "kvarenad_evictions_total", 1, 5000) &&
	      metric(d, "kvarenad_evictions_total") == 1 && count_files(dir, ".kvspill", NULL) == 1,
	      "the spill completes: one file, the victim's blocks freed, one eviction");
	for (k = 0; k < 3; k++) {
		const struct reply *rk = reference((int)k);

		ok += rk && ask(d, cv[k].p2, 24, &r2) == 0 && same_reply(&r2, rk);
	}
	CHECK(ok == 3 && metric(d, "kvarenad_tier_restores_total") == 1 &&
	      metric(d, "kvarenad_tier_recomputed_tokens_total") == 0,
	      "every conversation continues, output bit-identical (the victim restored, "
	      "nothing recomputed)");
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * An agent whose turn ended is the toolwait ranking's first victim (no
 * tool return is expected), and a spilled victim's blocks leave the
 * arena only once written: an agent that closes its session (DELETE)
 * before that frees them itself, and that is no eviction (in a trial,
 * 24 of 135 evictions were sessions spilled 1-17 ms before their
 * DELETE). The victim is forgotten, as DELETE forgets an idle
 * conversation, with its write in flight: no eviction counted, no file
 * left; the next victim, written, is one.
 */
static void test_closed_mid_spill(void)
{
	char *dir = new_dir("closed");
	struct kvd_config c, nc;
	struct convo cv[2];
	struct reply r1[2];
	struct kvd_conv *v;
	uint64_t ev_gone, spills_gone;
	char err[256];
	struct kvd *d;
	int k, in_flight = 0, busy;

	if (!dir)
		return;
	base_config(&c, dir);
	c.tier_prefetch = 0;
	d = start(&c);
	if (!d)
		goto out;
	pthread_mutex_lock(&d->lock);
	nc = d->cfg;
	nc.low_wm = 1;
	nc.high_wm = 2;			/* no pressure: the tool waits keep their KV */
	if (kvd_tiering_reload(d, &nc, err, sizeof(err)))
		printf("reload: %s\n", err);
	pthread_mutex_unlock(&d->lock);
	for (k = 0; k < 2; k++) {
		train_class(d, ref_tool[k], 60000000);
		make_convo(&cv[k], k, ref_tool[k]);
		script(d, cv[k].call);
		ask(d, cv[k].p1, 8, &r1[k]);
	}
	pthread_mutex_lock(&d->lock);
	kvd_make_room(d, kvd_blocks_free(d) + 1);
	for (v = d->convs; v && !(v->tier_op && v->tier_spill_evicting); v = v->next)
		;
	in_flight = v != NULL;
	if (v)
		kvd_conv_free(d, v);	/* what DELETE does to an idle conversation */
	ev_gone = d->m.evictions;
	pthread_mutex_unlock(&d->lock);
	CHECK(in_flight && ev_gone == 0,
	      "a victim taken, its spill in flight, then its session closed: no eviction (%llu)",
	      (unsigned long long)ev_gone);
	/* the cancelled write's completion reaped */
	for (k = 0, busy = 1; k < 2000 && busy; k++) {
		msleep(10);
		pthread_mutex_lock(&d->lock);
		busy = kvd_tiering_busy(d);
		pthread_mutex_unlock(&d->lock);
	}
	spills_gone = metric(d, "kvarenad_tier_spills_total");
	CHECK(!busy && metric(d, "kvarenad_evictions_total") == 0 && spills_gone == 0 &&
	      count_files(dir, ".kvspill", NULL) == 0,
	      "its write cancelled: no spill counted (%llu), no file, still no eviction",
	      (unsigned long long)spills_gone);
	demand(d);
	CHECK(await_metric(d, "kvarenad_tier_spills_total", 1, 20000) &&
	      await_metric(d, "kvarenad_evictions_total", 1, 5000) &&
	      metric(d, "kvarenad_evictions_total") == 1,
	      "the other conversation evicted, written: one eviction");
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * A session closed while its KV is being read back: the restore's ticket
 * takes the session's blocks (tiering.c, kvd_tiering_abandon; conv.c,
 * kvd_conv_detach_kv) and gives them back when the read completes. A
 * conversation is spilled and freed, its restore started, and its
 * session closed (as DELETE does) with the read in flight: once it is
 * reaped every block is free again, no conversation answers to the old
 * session id, no file is left, and the next conversation is served.
 */
static void test_closed_mid_restore(void)
{
	char *dir = new_dir("closed-restore");
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2;
	struct kvd_conv *v;
	struct kvd *d;
	uint32_t free0 = 0, free1 = 0, users = 0;
	uint64_t sid = 0;
	int k, spilled = 0, restoring = 0, busy = 1, found = 1;

	if (!dir)
		return;
	base_config(&c, dir);
	c.tier_prefetch = 0;
	d = start(&c);
	if (!d)
		goto out;
	train_class(d, ref_tool[0], 60000000);
	make_convo(&cv, 0, ref_tool[0]);
	script(d, cv.call);
	pthread_mutex_lock(&d->lock);
	free0 = kvd_blocks_free(d);
	pthread_mutex_unlock(&d->lock);
	ask(d, cv.p1, 8, &r1);
	/* spilled at its tool wait (the arena under pressure), written; then
	 * evicted: its blocks freed, the file its only copy */
	for (k = 0; k < 2000 && !spilled; k++) {
		msleep(10);
		pthread_mutex_lock(&d->lock);
		v = kvd_conv_find_id(d, r1.session);
		if (v && v->tier_file && !v->tier_op && kvd_conv_blocks(v))
			kvd_make_room(d, kvd_blocks_free(d) + 1);
		spilled = v && v->tier_file && !v->tier_op && !kvd_conv_blocks(v);
		pthread_mutex_unlock(&d->lock);
	}
	CHECK(spilled, "the conversation spilled, its blocks freed");
	pthread_mutex_lock(&d->lock);
	v = kvd_conv_find_id(d, r1.session);
	if (spilled && v) {
		/* the restore starts: the job it is for would wait (1) */
		restoring = kvd_tiering_need_kv(d, v) == 1 && v->tier_op;
		sid = v->as.sid;
		if (restoring)
			kvd_conv_free(d, v);	/* what DELETE does */
	}
	pthread_mutex_unlock(&d->lock);
	CHECK(restoring, "its restore in flight, then its session closed");
	for (k = 0; k < 2000 && busy; k++) {
		msleep(10);
		pthread_mutex_lock(&d->lock);
		busy = kvd_tiering_busy(d);
		pthread_mutex_unlock(&d->lock);
	}
	pthread_mutex_lock(&d->lock);
	free1 = kvd_blocks_free(d);
	found = sid && kvd_conv_by_sid(d, sid) != NULL;
	for (k = 0; k < (int)d->geom.blocks_total; k++)
		users += d->block_users[k];
	pthread_mutex_unlock(&d->lock);
	CHECK(!busy && free1 == free0 && !users && !found &&
	      count_files(dir, ".kvspill", NULL) == 0,
	      "the read reaped: %u of %u blocks free again, %u holders counted, the old "
	      "session unknown (%d), no file left", free1, free0, users, found);
	CHECK(ask(d, cv.p1, 8, &r2) == 0 && strcmp(r2.session, r1.session),
	      "the next conversation is served");
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * Retention ending beside the tier (conv.c, kvd_conv_expire; tiering.c,
 * kvd_tiering_expire): a conversation whose retention ends while its
 * spill is being written is looked at again 100 ms later, its KV kept;
 * once written (a clean copy: the file holds exactly the arena's KV),
 * its retention ending releases its blocks at once, the file keeping
 * the KV (it kept them until pressure came, before).
 */
static void test_expire_tier(void)
{
	char *dir = new_dir("expire-tier");
	struct kvd_config c, nc;
	struct convo cv[2];
	struct reply r1[2];
	struct kvd_conv *v;
	struct kvd *d;
	uint64_t now = 0, dl = 0;
	uint32_t held = 0, left = 1;
	char err[256];
	int k, in_flight = 0, clean = 0, file = 0;

	if (!dir)
		return;
	base_config(&c, dir);
	c.tier_prefetch = 0;
	d = start(&c);
	if (!d)
		goto out;
	for (k = 0; k < 2; k++) {
		train_class(d, ref_tool[k], 60000000);
		make_convo(&cv[k], k, ref_tool[k]);
	}
	/* the arena under pressure: the tool wait's KV is written behind
	 * and kept, a clean copy */
	script(d, cv[0].call);
	ask(d, cv[0].p1, 8, &r1[0]);
	for (k = 0; k < 2000 && !clean; k++) {
		msleep(10);
		pthread_mutex_lock(&d->lock);
		v = kvd_conv_find_id(d, r1[0].session);
		clean = v && v->tier_file && !v->tier_op && kvd_conv_blocks(v);
		if (clean) {
			now = kvd_now_ns();
			kvd_conv_set_deadline(d, v, now);
			kvd_conv_expire(d, now);
			left = kvd_conv_blocks(v);
			file = v->tier_file != 0;
		}
		pthread_mutex_unlock(&d->lock);
	}
	CHECK(clean && !left && file,
	      "retention ending with its KV on disk: %u blocks left in the arena, the file kept "
	      "(%d)", left, file);
	/* no pressure: kept at the tool wait; then a victim, its spill in
	 * flight, when its retention ends */
	pthread_mutex_lock(&d->lock);
	nc = d->cfg;
	nc.low_wm = 1;
	nc.high_wm = 2;
	if (kvd_tiering_reload(d, &nc, err, sizeof(err)))
		printf("reload: %s\n", err);
	pthread_mutex_unlock(&d->lock);
	script(d, cv[1].call);
	ask(d, cv[1].p1, 8, &r1[1]);
	pthread_mutex_lock(&d->lock);
	v = kvd_conv_find_id(d, r1[1].session);
	if (v && !v->tier_op) {
		kvd_make_room(d, kvd_blocks_free(d) + 1);
		in_flight = v->tier_op && v->tier_spill_evicting;
		held = kvd_conv_blocks(v);
		now = kvd_now_ns();
		kvd_conv_set_deadline(d, v, now);
		kvd_conv_expire(d, now);
		dl = v->deadline_ns;
	}
	pthread_mutex_unlock(&d->lock);
	CHECK(in_flight && held && dl == now + 100000000ull,
	      "retention ending while its spill is written: its %u blocks kept, looked at again "
	      "in %.0f ms", held, dl ? (dl - (double)now) / 1e6 : -1.0);
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * KV released because its retention ended (no disk tier) is no eviction
 * (the arena did not need the memory) but is counted (kv_expired), and
 * the conversation's return is a miss that recomputes it. Before, such
 * a return was counted nowhere: neither a miss nor recomputed tokens, so
 * a policy whose KV expired looked as if it had kept it.
 */
static void test_expire_miss(void)
{
	const struct reply *ref = reference(1);
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2;
	struct kvd_conv *v;
	struct kvd *d;
	uint64_t now;
	uint32_t left = 1;

	if (!ref)
		return;
	make_convo(&cv, 1, ref_tool[1]);
	base_config(&c, NULL);
	d = start(&c);
	if (!d)
		return;
	script(d, cv.call);
	CHECK(ask(d, cv.p1, 8, &r1) == 0, "A calls a tool; its KV kept (no pressure)");
	pthread_mutex_lock(&d->lock);
	v = kvd_conv_find_id(d, r1.session);
	if (v) {
		now = kvd_now_ns();
		kvd_conv_set_deadline(d, v, now);
		kvd_conv_expire(d, now);
		left = kvd_conv_blocks(v);
	}
	pthread_mutex_unlock(&d->lock);
	CHECK(!left && metric(d, "kvarenad_kv_expired_total") == 1 &&
	      metric(d, "kvarenad_evictions_total") == 0,
	      "its retention ends: KV released (%u blocks left), counted expired, no eviction",
	      left);
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref) &&
	      metric(d, "kvarenad_kv_misses_total") == 1 &&
	      metric(d, "kvarenad_tier_recomputed_tokens_total") > 0,
	      "its return is a miss that recomputes it (%llu misses, %llu tokens), output "
	      "bit-identical", (unsigned long long)metric(d, "kvarenad_kv_misses_total"),
	      (unsigned long long)metric(d, "kvarenad_tier_recomputed_tokens_total"));
	stop(d);
}

/*
 * KV discarded by the tier keeps the conversation's kvarena session (its
 * tool wait still known to the kernel) with no block (tiering.c,
 * discard): on its return the conversation shares the prefix cache's
 * blocks of its prompt as a new one would (admit.c, admit_one: a session
 * with neither blocks nor positions is opened anew). A and B begin with
 * one long system prompt; A's KV is discarded ([tier] decisions = no);
 * A's next turn reuses the system prompt's cached blocks, B still
 * holding them, and replies as it does with its KV kept.
 */
static void test_discard_shares(void)
{
	char *dir = new_dir("discard");
	struct kvd_config c;
	struct reply ra, rb, r2, ref;
	struct kvd_conv *v;
	struct kvd *d;
	char sys[4096], pa[6144], pb[6144], pa2[12288];
	uint32_t bt = 0, held = 1, n_sys = 0;
	uint64_t rec;
	int k, o, pass_no;

	if (!dir)
		return;
	o = snprintf(sys, sizeof(sys), "<|im_start|>system\nYou are a build agent. Rules:");
	for (k = 0; o < 600; k++)
		o += snprintf(sys + o, sizeof(sys) - (size_t)o, " r%d", (k * 31) % 97);
	snprintf(sys + o, sizeof(sys) - (size_t)o, "<|im_end|>\n");
	snprintf(pa, sizeof(pa), "%s<|im_start|>user\nA: build it<|im_end|>\n"
		 "<|im_start|>assistant\n", sys);
	snprintf(pb, sizeof(pb), "%s<|im_start|>user\nB: test it<|im_end|>\n"
		 "<|im_start|>assistant\n", sys);
	for (pass_no = 0; pass_no < 2; pass_no++) {
		base_config(&c, pass_no ? NULL : dir);
		c.prefix_cache = 1;
		c.tier_decisions = 0;
		d = start(&c);
		if (!d)
			goto out;
		bt = d->geom.block_tokens;
		n_sys = (uint32_t)kve_tokenize(d->tok, sys, strlen(sys), 1, NULL, 0);
		ask(d, pa, 8, &ra);
		ask(d, pb, 8, &rb);
		snprintf(pa2, sizeof(pa2), "%s%.*s<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n"
			 "<|im_start|>assistant\n", pa, (int)ra.len, ra.text);
		if (!pass_no) {
			pthread_mutex_lock(&d->lock);
			v = kvd_conv_find_id(d, ra.session);
			if (v)
				kvd_tiering_evict(d, v);
			held = v && v->has_kv ? kvd_conv_blocks(v) : 1;
			pthread_mutex_unlock(&d->lock);
			CHECK(v && v->has_kv && !held, "A's KV discarded, its session kept");
			ask(d, pa2, 8, &r2);
			CHECK(!r2.error && r2.usage.cached_tokens >= n_sys / bt * bt &&
			      r2.usage.cached_tokens < r2.usage.prompt_tokens - 8,
			      "A's return shares the system prompt's cached blocks: %u of %u "
			      "tokens (the system prompt's full blocks: %u)", r2.usage.cached_tokens,
			      r2.usage.prompt_tokens, n_sys / bt * bt);
			rec = metric(d, "kvarenad_tier_recomputed_tokens_total");
			CHECK(rec > 0 && rec <= r2.usage.prompt_tokens - r2.usage.cached_tokens,
			      "its recomputed tokens are those it computed again, not the "
			      "cache's: %llu of %u computed", (unsigned long long)rec,
			      r2.usage.prompt_tokens - r2.usage.cached_tokens);
		} else {
			ask(d, pa2, 8, &ref);
		}
		stop(d);
	}
	CHECK(same_reply(&r2, &ref), "its reply as with its KV kept");
out:
	rm_rf(dir);
	free(dir);
}

/*
 * A conversation whose KV was discarded (its session kept, no block)
 * that returns to no room waits holding nothing, not even the cached
 * blocks of its prompt it shared in that turn (admit.c, wait_empty: a
 * session opened anew gives back what it attached; kept, they are part
 * of the arena no running job can take). A and B begin with one long
 * system prompt; A's KV is discarded; the arena is held elsewhere; A's
 * next turn (~200 tokens more) shares the system prompt's blocks, finds
 * no room for the rest and waits with none; with the room back it
 * replies as it does with its KV kept.
 */
static void test_discard_waits(void)
{
	char *dir = new_dir("discard_waits");
	struct kvd_config c;
	struct reply ra, rb, r2, ref;
	struct kvd_conv *v, *vb;
	struct kve_arena_session blk = { 0 };
	struct kvd_job *ja = NULL;
	struct kvd *d;
	char sys[4096], pa[6144], pb[6144], pa2[12288];
	uint32_t held = 1, hold = 0, a_blocks = 1, b_blocks = 1;
	uint64_t turn0, turns = 0;
	int k, o, pass_no, rc = -1, opened = 0, queued = 0, i;

	if (!dir)
		return;
	memset(&r2, 0, sizeof(r2));
	memset(&ref, 0, sizeof(ref));
	o = snprintf(sys, sizeof(sys), "<|im_start|>system\nYou are a build agent. Rules:");
	for (k = 0; o < 600; k++)
		o += snprintf(sys + o, sizeof(sys) - (size_t)o, " r%d", (k * 31) % 97);
	snprintf(sys + o, sizeof(sys) - (size_t)o, "<|im_end|>\n");
	snprintf(pa, sizeof(pa), "%s<|im_start|>user\nA: build it<|im_end|>\n"
		 "<|im_start|>assistant\n", sys);
	snprintf(pb, sizeof(pb), "%s<|im_start|>user\nB: test it<|im_end|>\n"
		 "<|im_start|>assistant\n", sys);
	for (pass_no = 0; pass_no < 2; pass_no++) {
		base_config(&c, pass_no ? NULL : dir);
		c.prefix_cache = 1;
		c.tier_decisions = 0;
		d = start(&c);
		if (!d)
			goto out;
		ask(d, pa, 8, &ra);
		ask(d, pb, 8, &rb);
		o = snprintf(pa2, sizeof(pa2), "%s%.*s<|im_end|>\n<|im_start|>user\nthe log:", pa,
			     (int)ra.len, ra.text);
		for (k = 0; k < 60; k++)
			o += snprintf(pa2 + o, sizeof(pa2) - (size_t)o, " line%d", (k * 17) % 89);
		snprintf(pa2 + o, sizeof(pa2) - (size_t)o, "<|im_end|>\n<|im_start|>assistant\n");
		if (pass_no) {
			ask(d, pa2, 8, &ref);
			stop(d);
			break;
		}
		pthread_mutex_lock(&d->lock);
		v = kvd_conv_find_id(d, ra.session);
		if (v)
			kvd_tiering_evict(d, v);
		held = v && v->has_kv ? kvd_conv_blocks(v) : 1;
		/* the rest of the arena held elsewhere */
		hold = kvd_blocks_free(d);
		if (v && v->has_kv && !held && hold)
			rc = hold_blocks(d, hold, &blk, &opened);
		pthread_mutex_unlock(&d->lock);
		CHECK(rc == 0, "A's KV discarded, its session kept; the %u free blocks held "
		      "elsewhere", hold);
		if (rc) {
			stop(d);
			goto out;
		}
		ja = submit(d, pa2, 8);
		/* several admission tries while the room is lacking */
		pthread_mutex_lock(&d->lock);
		turn0 = d->n_step_us;
		pthread_mutex_unlock(&d->lock);
		for (i = 0; ja && i < 3000 && turns < 8; i++) {
			msleep(10);
			pthread_mutex_lock(&d->lock);
			turns = d->n_step_us - turn0;
			pthread_mutex_unlock(&d->lock);
		}
		pthread_mutex_lock(&d->lock);
		v = kvd_conv_find_id(d, ra.session);
		vb = kvd_conv_find_id(d, rb.session);
		queued = ja && ja->state == JOB_QUEUED;
		a_blocks = v && v->has_kv ? kvd_conv_blocks(v) : 1;
		b_blocks = vb && vb->has_kv ? kvd_conv_blocks(vb) : 0;
		pthread_mutex_unlock(&d->lock);
		CHECK(ja && turns >= 8 && queued && !a_blocks && !b_blocks,
		      "%llu scheduler turns later A's return waits holding %u blocks (room was "
		      "made for it: B's idle KV holds %u)", (unsigned long long)turns, a_blocks,
		      b_blocks);
		release_blocks(d, &blk, &opened);
		kvd_wake(d);
		if (ja)
			collect(ja, &r2);
		ja = NULL;
		stop(d);
	}
	CHECK(!r2.error && r2.n_tokens && same_reply(&r2, &ref),
	      "with the room back A replies as it does with its KV kept");
out:
	rm_rf(dir);
	free(dir);
}

/*
 * An idle daemon whose conversation waits on a tool sleeps until its
 * tier's next timer (sched.c: the poll's timeout from kvd_tiering_poll's
 * milliseconds): the wait's overrun timer, due within the poll's 250 ms
 * cap, may not turn the scheduler into a busy loop until it fires. Over
 * the first two seconds of a wait predicted at half a second (its overrun
 * fires and is armed again) the scheduler turns a few times, not
 * thousands.
 */
static void test_timer_sleeps(void)
{
	char *dir = new_dir("timer_sleeps");
	struct kvd_config c;
	struct convo cv;
	struct reply r1;
	struct kvd *d;
	uint64_t t0, t1;

	if (!dir)
		return;
	base_config(&c, dir);
	d = start(&c);
	if (!d)
		goto out;
	train_class(d, ref_tool[0], 500000);
	make_convo(&cv, 0, ref_tool[0]);
	script(d, cv.call);
	ask(d, cv.p1, 8, &r1);
	pthread_mutex_lock(&d->lock);
	t0 = d->n_step_us;
	pthread_mutex_unlock(&d->lock);
	msleep(2000);
	pthread_mutex_lock(&d->lock);
	t1 = d->n_step_us;
	pthread_mutex_unlock(&d->lock);
	CHECK(!r1.error && metric(d, "kvarenad_tool_overruns_total") >= 1 && t1 - t0 <= 60,
	      "a conversation waits on a tool past its half-second prediction: %llu scheduler "
	      "turns in two seconds (%llu overruns)", (unsigned long long)(t1 - t0),
	      (unsigned long long)metric(d, "kvarenad_tool_overruns_total"));
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

#ifndef __SANITIZE_ADDRESS__
/* Anonymous memory this process holds (heap, stacks): the daemon's own,
 * besides the arena (a memfd: RssShmem) and the workers (processes). */
static long rss_anon_kb(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	long kb = -1;

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "RssAnon:", 8))
			kb = atol(line + 8);
	if (f)
		fclose(f);
	return kb;
}

/*
 * 1000 conversations, each past its first request and waiting on a tool
 * (TOOL_WAIT, KV in the arena): the daemon's memory besides KV stays
 * under 256 KiB per idle conversation (BENCH=agents1000's goal). Run
 * unsanitized (ASan's quarantine and redzones are not the daemon's).
 */
/*
 * The last agent's tool returns a long result (64 KiB of build log): each
 * byte of the prompt probes the text filter in front of the conversations'
 * text index, and a false positive past the conversation's end takes the
 * place of a candidate (the longest KVD_MAX_CANDS are kept). With n
 * conversations in the filter, the agent's own must stay among them.
 */
static void long_result(struct kvd *d, const char *p, const struct reply *r, int n)
{
	enum { TAIL = 65536 };
	size_t pl = strlen(p), tl = pl + r->len, o;
	char *q = malloc(tl + TAIL + 64);
	struct kvd_cand *cand = calloc(4096, sizeof(*cand));
	uint32_t k, nc, fp = 0, found = 0;

	if (!q || !cand)
		goto out;
	memcpy(q, p, pl);
	memcpy(q + pl, r->text, r->len);
	o = tl + (size_t)sprintf(q + tl, "<|im_end|>\n<|im_start|>tool\n<tool_response>\n");
	for (k = 0; o < tl + TAIL; k++)
		o += (size_t)sprintf(q + o, "step %u of the build: ok in %u ms\n", k,
				     (k * 37) % 997);
	nc = kvd_conv_candidates(d, 0, q, o, cand, 4096);
	for (k = 0; k < nc; k++)
		fp += cand[k].len > tl;
	nc = kvd_conv_candidates(d, 0, q, o, cand, KVD_MAX_CANDS);
	for (k = 0; k < nc; k++)
		found |= cand[k].len == tl;
	CHECK(found, "a 64 KiB tool result with %d conversations indexed: the agent's own "
	      "is a candidate (%u false positives past its end, %d kept)", n, fp,
	      KVD_MAX_CANDS);
out:
	free(cand);
	free(q);
}

static void test_idle1000(void)
{
	struct kvd_config c;
	struct reply r;
	struct kvd *d;
	long before, after;
	int i, ok = 1, n = getenv("KVD_TEST_IDLE") ? atoi(getenv("KVD_TEST_IDLE")) : 1000;
	char p[512];

	base_config(&c, NULL);
	c.kv_blocks = 8192;
	c.prefix_cache = 1;
	/* the tools never return: their KV kept for the whole test, not
	 * released at 4x the predicted wait (10 s at least) */
	c.toolwait_min_s = 600;
	d = start(&c);
	if (!d)
		return;
	/* warm: the first requests allocate what every one then reuses */
	for (i = 0; i < 8; i++) {
		snprintf(p, sizeof(p), "<|im_start|>user\nwarm %d<|im_end|>\n<|im_start|>assistant\n", i);
		script(d, "<tool_call>\n{\"name\": \"read\", \"arguments\": {}}\n</tool_call>");
		ok &= ask(d, p, 4, &r) == 0;
	}
	before = rss_anon_kb();
	for (i = 0; i < n && ok; i++) {
		snprintf(p, sizeof(p), "<|im_start|>system\nYou are agent %d of the fleet.<|im_end|>\n"
			 "<|im_start|>user\nlist the files of job %d<|im_end|>\n"
			 "<|im_start|>assistant\n", i, i * 7);
		script(d, "<tool_call>\n{\"name\": \"read\", \"arguments\": {}}\n</tool_call>");
		ok &= ask(d, p, 4, &r) == 0;
	}
	after = rss_anon_kb();
	pthread_mutex_lock(&d->lock);
	{
		struct kvd_conv *cv;
		uint32_t tw = 0;

		for (cv = d->convs; cv; cv = cv->next)
			tw += cv->kstate == KVA_STATE_TOOL_WAIT && cv->has_kv;
		CHECK(ok && tw >= (uint32_t)n, "%d conversations held, %u of them waiting on a tool "
		      "with their KV", n, tw);
	}
	pthread_mutex_unlock(&d->lock);
	CHECK(before > 0 && (after - before) * 1024 / n <= 256 * 1024,
	      "daemon memory besides KV: %ld KiB for %d idle conversations, %.1f KiB each "
	      "(bound 256 KiB)", after - before, n, (double)(after - before) / n);
	long_result(d, p, &r, n);
	stop(d);
}
#endif

/*
 * A prefetch once per prediction: KV prefetched and taken again by the
 * arena before the tool returned is not prefetched again for the same
 * prediction (that took another's room, which was then prefetched again:
 * 400 agents in an arena of 30 read the disk tier 10 times over, 17
 * prefetches per tool wait); it comes back when the result arrives (here
 * before the tool's overrun, which would predict it anew:
 * overrun_prefetch), output bit-identical.
 */
static void test_prefetch_once(void)
{
	const struct reply *ref = reference(3);
	char *dir = new_dir("prefetch1");
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2;
	struct kvd *d;
	int tool_ms;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 3, ref_tool[3]);
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(250);
	d = start(&c);
	if (!d)
		goto out;
	tool_ms = slow(1500);
	train_class(d, ref_tool[3], (uint64_t)tool_ms * 1000);
	script(d, cv.call);
	CHECK(ask(d, cv.p1, 8, &r1) == 0, "a call to a tool that takes %d ms", tool_ms);
	await_metric(d, "kvarenad_tier_spills_total", 1, tool_ms);
	demand(d);
	CHECK(await_metric(d, "kvarenad_tier_prefetches_total", 1, 2 * tool_ms) &&
	      await_metric(d, "kvarenad_tier_restores_total", 1, 2 * tool_ms),
	      "evicted, then prefetched before the tool returns");
	demand(d);	/* the arena takes it again */
	CHECK(!strcmp(tier_of(d, r1.session), "disk"), "evicted again: on disk only");
	msleep(tool_ms / 5);
	CHECK(metric(d, "kvarenad_tier_prefetches_total") == 1 &&
	      metric(d, "kvarenad_tier_restores_total") == 1,
	      "not prefetched again for the same prediction (%llu prefetches, %llu restores)",
	      (unsigned long long)metric(d, "kvarenad_tier_prefetches_total"),
	      (unsigned long long)metric(d, "kvarenad_tier_restores_total"));
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref) &&
	      metric(d, "kvarenad_tier_restores_total") == 2,
	      "restored when the result arrives: output bit-identical to the run without "
	      "eviction");
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * KV prefetched for a tool's return that is due is not a victim for
 * another request's room while a job runs (that job gives room back; the
 * request waits for it): taken, it was read back on demand when the
 * result came, a restore stall and a prefetch spent for nothing (6 of 29
 * stalls in a 12-agent trial with an arena of two sessions). A is
 * spilled, evicted and prefetched; B runs; the arena then needs every
 * block: A's stay, and A's result finds its KV (no stall, output
 * bit-identical). With nothing running the waiting request goes first
 * (prefetch_once: taken again).
 */
static void test_prefetch_held(void)
{
	const struct reply *ref = reference(3);
	const char *b_prompt = "<|im_start|>user\nwrite a long story<|im_end|>\n"
			       "<|im_start|>assistant\n";
	char *dir = new_dir("held");
	struct kvd_job *jb = NULL;
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2, rb;
	struct kvd *d;
	double t0;
	int tool_ms, ran = 0, i;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 3, ref_tool[3]);
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(250);
	d = start(&c);
	if (!d)
		goto out;
	tool_ms = slow(4000);
	train_class(d, ref_tool[3], (uint64_t)tool_ms * 1000);
	script(d, cv.call);
	CHECK(ask(d, cv.p1, 8, &r1) == 0, "A calls a tool that takes %d ms", tool_ms);
	t0 = now_ms();
	await_metric(d, "kvarenad_tier_spills_total", 1, tool_ms);
	demand(d);
	CHECK(await_metric(d, "kvarenad_tier_prefetches_total", 1, 2 * tool_ms) &&
	      await_metric(d, "kvarenad_tier_restores_total", 1, 2 * tool_ms) &&
	      !strcmp(tier_of(d, r1.session), "arena"),
	      "A evicted, then prefetched before its tool returns (%.0f ms into the wait)",
	      now_ms() - t0);
	/* B runs; while it does, the arena needs every block */
	jb = submit(d, b_prompt, 48);
	for (i = 0; jb && i < 2000 && !ran; i++) {
		pthread_mutex_lock(&d->lock);
		if (jb->state == JOB_RUNNING) {
			kvd_make_room(d, d->geom.blocks_total);
			ran = 1;
		}
		pthread_mutex_unlock(&d->lock);
		if (!ran)
			msleep(1);
	}
	CHECK(ran && !strcmp(tier_of(d, r1.session), "arena") &&
	      metric(d, "kvarenad_evictions_total") == 1,
	      "the arena needs its memory while B runs: A's prefetched KV stays (tier %s, %llu "
	      "evictions)", tier_of(d, r1.session),
	      (unsigned long long)metric(d, "kvarenad_evictions_total"));
	memset(&rb, 0, sizeof(rb));
	CHECK(jb && collect(jb, &rb) == 0 && rb.n_tokens > 0, "B completes");
	jb = NULL;
	while (now_ms() - t0 < tool_ms)
		msleep(20);
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref) &&
	      metric(d, "kvarenad_tier_restore_stalls_total") == 0 &&
	      metric(d, "kvarenad_tier_restores_total") == 1,
	      "A's result finds its KV: no stall, one restore (the prefetch), output "
	      "bit-identical to the run without eviction (%llu stalls)",
	      (unsigned long long)metric(d, "kvarenad_tier_restore_stalls_total"));
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * A prefetch does not take KV another prefetch brought back, even of a
 * conversation expected back later: that one is not prefetched again in
 * its wait, so its return would stall for certain. A's tool (mostly
 * a_ms, now and then at once) is prefetched at once and held; B's
 * (a fixed b_ms, started after) is due back first; B is evicted and the
 * rest of the arena held by a kvarena session of the test's own, so
 * that B's prefetch finds no room but A's. A's KV must stay (before, it
 * was taken, and A's result stalled: taken_again).
 */
static void test_prefetch_taken(void)
{
	char *dir = new_dir("taken");
	struct kve_arena_session blk = { 0 };
	struct kvd_config c;
	struct convo a, b;
	struct reply ra, rb, r2;
	struct kvd_conv *cc;
	struct kvd *d;
	uint32_t cls, i, left = 0;
	double tb;
	int a_ms = slow(16000), b_ms = slow(3000), rc = -1, opened = 0;

	if (!dir)
		return;
	make_convo(&a, 4, "slow_build");
	make_convo(&b, 5, "quick_grep");
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(250);
	d = start(&c);
	if (!d)
		goto out;
	pthread_mutex_lock(&d->lock);
	cls = kvd_toolclass(d, 0, "slow_build", strlen("slow_build"));
	kvd_toolwait_record(d, cls, 100000);
	for (i = 0; i < 15; i++)
		kvd_toolwait_record(d, cls, (uint64_t)a_ms * 1000);
	pthread_mutex_unlock(&d->lock);
	train_class(d, "quick_grep", (uint64_t)b_ms * 1000);
	script(d, a.call);
	CHECK(ask(d, a.p1, 8, &ra) == 0, "A calls a tool of ~%d ms (now and then at once)", a_ms);
	pthread_mutex_lock(&d->lock);
	cc = kvd_conv_find_id(d, ra.session);
	if (cc)
		kvd_tiering_evict(d, cc);
	pthread_mutex_unlock(&d->lock);
	CHECK(await_metric(d, "kvarenad_tier_prefetches_total", 1, a_ms / 4) &&
	      await_metric(d, "kvarenad_tier_restores_total", 1, a_ms / 4) &&
	      !strcmp(tier_of(d, ra.session), "arena"),
	      "A evicted and prefetched at once (its tool's 5%% quantile): back in the arena");
	script(d, b.call);
	CHECK(ask(d, b.p1, 8, &rb) == 0, "B calls a tool of %d ms, due back before A", b_ms);
	tb = now_ms();
	await_metric(d, "kvarenad_tier_spills_total", 2, b_ms / 2);
	/* B evicted, and every free block held elsewhere, in one turn of
	 * the lock: B's prefetch finds A's KV the only room */
	pthread_mutex_lock(&d->lock);
	cc = kvd_conv_find_id(d, rb.session);
	if (cc && cc->has_kv && cc->as.s.n_blocks) {
		kvd_tiering_evict(d, cc);
		left = kvd_blocks_free(d);
		rc = hold_blocks(d, left, &blk, &opened);
		left = kvd_blocks_free(d);
	}
	pthread_mutex_unlock(&d->lock);
	CHECK(rc == 0 && left == 0 && !strcmp(tier_of(d, rb.session), "disk"),
	      "B evicted, the rest of the arena held elsewhere (%u free)", left);
	while (now_ms() - tb < b_ms)
		msleep(20);
	CHECK(!strcmp(tier_of(d, ra.session), "arena") && !strcmp(tier_of(d, rb.session), "disk"),
	      "B's prefetch due: A's prefetched KV not taken for it (A %s, B %s)",
	      tier_of(d, ra.session), tier_of(d, rb.session));
	release_blocks(d, &blk, &opened);
	CHECK(ask(d, b.p2, 8, &r2) == 0 && r2.n_tokens > 0, "B continues once there is room");
	CHECK(ask(d, a.p2, 8, &r2) == 0 && r2.n_tokens > 0 &&
	      metric(d, "kvarenad_tier_restore_stall_causes_total{cause=\"taken_again\"}") == 0,
	      "A's result finds its KV (%llu stalls taken_again)",
	      (unsigned long long)metric(d, "kvarenad_tier_restore_stall_causes_total"
					 "{cause=\"taken_again\"}"));
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/* A class whose waits take `short_ms` mostly (12 of 16) and `long_ms`
 * now and then (4 of 16): a tool that sometimes runs past its mean. */
static void train_two(struct kvd *d, const char *tool, int short_ms, int long_ms)
{
	uint32_t cls, i;

	pthread_mutex_lock(&d->lock);
	cls = kvd_toolclass(d, 0, tool, strlen(tool));
	for (i = 0; i < 16; i++)
		kvd_toolwait_record(d, cls, (uint64_t)(i < 12 ? short_ms : long_ms) * 1000);
	pthread_mutex_unlock(&d->lock);
}

/* A started: its tool call made, its KV spilled, evicted and prefetched
 * back (the first prefetch of the wait, held). 0 or -1; *t0 the wait's
 * start as the test saw it. */
static int prefetched_back(struct kvd *d, const struct convo *cv, struct reply *r1, double *t0,
			   int tool_ms)
{
	script(d, cv->call);
	if (ask(d, cv->p1, 8, r1))
		return -1;
	*t0 = now_ms();
	await_metric(d, "kvarenad_tier_spills_total", 1, tool_ms);
	demand(d);
	if (!await_metric(d, "kvarenad_tier_prefetches_total", 1, tool_ms) ||
	    !await_metric(d, "kvarenad_tier_restores_total", 1, tool_ms))
		return -1;
	return strcmp(tier_of(d, r1->session), "arena") ? -1 : 0;
}

/*
 * A tool past its prediction whose return is now due within a restore's
 * lead keeps the hold on its prefetched KV. The class's waits are 1.2 s
 * (12 of 16) or 3 s: predicted 1.65 s (the mean), and at the overrun
 * (1.9 s) the return's 5% quantile is a few ms away. A's tool takes 3 s;
 * after the overrun B runs and the arena needs every block: A's KV stays
 * and its result finds it. Before, every overrun ended the hold: the arena
 * took A's KV, and the return read it back on demand (taken_again: 8 of
 * 14 stalls in an eviction run).
 */
static void test_overrun_hold(void)
{
	const struct reply *ref = reference(5);
	const char *b_prompt = "<|im_start|>user\nwrite a long story<|im_end|>\n"
			       "<|im_start|>assistant\n";
	char *dir = new_dir("ovhold");
	struct kvd_job *jb = NULL;
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2, rb;
	struct kvd *d;
	double t0 = 0;
	int tool_ms = slow(3000), ran = 0, i, kept = 0;
	uint64_t ev = 0;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 5, ref_tool[5]);
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(250);
	d = start(&c);
	if (!d)
		goto out;
	train_two(d, ref_tool[5], slow(1200), tool_ms);
	CHECK(prefetched_back(d, &cv, &r1, &t0, tool_ms) == 0,
	      "A (a tool of 1.2 s, now and then %d ms) evicted and prefetched back (%.0f ms "
	      "into the wait)", tool_ms, now_ms() - t0);
	CHECK(await_metric(d, "kvarenad_tool_overruns_total", 1, tool_ms),
	      "A's tool runs past its prediction (%.0f ms into the wait)", now_ms() - t0);
	ev = metric(d, "kvarenad_evictions_total");
	jb = submit(d, b_prompt, 48);
	for (i = 0; jb && i < 2000 && !ran; i++) {
		struct kvd_conv *cc;

		pthread_mutex_lock(&d->lock);
		if (jb->state == JOB_RUNNING) {
			kvd_make_room(d, d->geom.blocks_total);
			cc = kvd_conv_find_id(d, r1.session);
			kept = cc && cc->has_kv && cc->as.s.n_blocks;
			ran = 1;
		}
		pthread_mutex_unlock(&d->lock);
		if (!ran)
			msleep(1);
	}
	CHECK(ran && kept && metric(d, "kvarenad_evictions_total") == ev,
	      "the arena needs every block while B runs, %.0f ms into A's wait: A's prefetched "
	      "KV stays (its return is due; %llu evictions, %llu before)", now_ms() - t0,
	      (unsigned long long)metric(d, "kvarenad_evictions_total"), (unsigned long long)ev);
	memset(&rb, 0, sizeof(rb));
	CHECK(jb && collect(jb, &rb) == 0 && rb.n_tokens > 0, "B completes");
	jb = NULL;
	while (now_ms() - t0 < tool_ms)
		msleep(20);
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref) &&
	      metric(d, "kvarenad_tier_restore_stalls_total") == 0 &&
	      metric(d, "kvarenad_tier_restores_total") == 1,
	      "A's result finds its KV: no stall, one restore (the prefetch), output "
	      "bit-identical to the run without eviction (%llu stalls)",
	      (unsigned long long)metric(d, "kvarenad_tier_restore_stalls_total"));
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * KV prefetched for a prediction the tool overran, and then taken, is
 * prefetched again for the new prediction. The class's waits are 1.5 s
 * (12 of 16) or 6 s: predicted 2.6 s, and at the overrun (2.9 s) the
 * return's 5% quantile is 1.5 s away, so the hold ends. A's tool takes
 * 6 s; the arena takes A's KV after the overrun; it is back before the
 * return, which does not stall. Before, a wait was prefetched once, and
 * the return read it back on demand (taken_again).
 */
static void test_overrun_prefetch(void)
{
	const struct reply *ref = reference(6);
	char *dir = new_dir("ovpf");
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2;
	struct kvd *d;
	double t0 = 0, back_at = 0;
	int tool_ms = slow(6000), i;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 6, ref_tool[6]);
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(250);
	d = start(&c);
	if (!d)
		goto out;
	train_two(d, ref_tool[6], slow(1500), tool_ms);
	CHECK(prefetched_back(d, &cv, &r1, &t0, tool_ms) == 0,
	      "A (a tool of 1.5 s, now and then %d ms) evicted and prefetched back (%.0f ms "
	      "into the wait)", tool_ms, now_ms() - t0);
	CHECK(await_metric(d, "kvarenad_tool_overruns_total", 1, tool_ms),
	      "A's tool runs past its prediction (%.0f ms into the wait)", now_ms() - t0);
	demand(d);
	CHECK(!strcmp(tier_of(d, r1.session), "disk") &&
	      metric(d, "kvarenad_evictions_total") == 2,
	      "its return not due yet, the hold ends: the arena takes A's KV (%.0f ms into the "
	      "wait)", now_ms() - t0);
	for (i = 0; i < 100000 && now_ms() - t0 < tool_ms; i++) {
		if (!back_at && !strcmp(tier_of(d, r1.session), "arena") &&
		    metric(d, "kvarenad_tier_restores_total") == 2)
			back_at = now_ms() - t0;
		msleep(10);
	}
	CHECK(back_at > 0 && metric(d, "kvarenad_tier_prefetches_total") == 2,
	      "prefetched again for the new prediction: back %.0f ms into the %d ms wait "
	      "(%llu prefetches)", back_at, tool_ms,
	      (unsigned long long)metric(d, "kvarenad_tier_prefetches_total"));
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref) &&
	      metric(d, "kvarenad_tier_restore_stalls_total") == 0,
	      "A's result finds its KV: no stall, output bit-identical to the run without "
	      "eviction (%llu stalls)",
	      (unsigned long long)metric(d, "kvarenad_tier_restore_stalls_total"));
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * A (conversation 0) calls a tool of a_ms, its class trained to that, is
 * spilled and evicted (*t0: then): its KV on disk only.
 */
static void a_on_disk(struct kvd *d, const struct convo *cv, int a_ms, struct reply *r1,
		      double *t0)
{
	train_class(d, ref_tool[0], (uint64_t)a_ms * 1000);
	script(d, cv->call);
	CHECK(ask(d, cv->p1, 8, r1) == 0 &&
	      await_metric(d, "kvarenad_tier_spills_total", 1, a_ms / 4),
	      "A calls a tool of %d ms, spilled", a_ms);
	*t0 = now_ms();
	demand(d);
	CHECK(!strcmp(tier_of(d, r1->session), "disk"), "A evicted: its KV on disk only");
}

/*
 * A (conversation 0) calls a tool of a_ms, its class trained to that, and
 * is spilled and evicted (*t0: then); the arena is held by a kvarena
 * session of the test's own (*blk, *opened) but for one block less than
 * A's restore needs, and A's prefetch comes due (its return less the
 * margin) and finds no room. 0: all of it so.
 */
static int short_of_room(struct kvd *d, const struct convo *cv, int a_ms, struct reply *r1,
			 double *t0, struct kve_arena_session *blk, int *opened)
{
	uint32_t bt, need = 0, left = 0, hold = 0, noroom = 0;
	struct kvd_conv *cc;
	int rc = -1, i;

	a_on_disk(d, cv, a_ms, r1, t0);
	pthread_mutex_lock(&d->lock);
	bt = d->geom.block_tokens;
	cc = kvd_conv_find_id(d, r1->session);
	if (cc) {
		need = (cc->tier_file_tokens + bt - 1) / bt;
		left = kvd_blocks_free(d);
		hold = left > need - 1 ? left - (need - 1) : 0;
		rc = hold_blocks(d, hold, blk, opened);
		left = kvd_blocks_free(d);
	}
	pthread_mutex_unlock(&d->lock);
	CHECK(rc == 0 && hold && left < need && left >= 12,
	      "the arena held elsewhere: %u blocks free, A's restore needs %u", left, need);
	if (rc)
		return -1;
	for (i = 0; i < a_ms / 10 && !noroom; i++) {
		msleep(10);
		pthread_mutex_lock(&d->lock);
		cc = kvd_conv_find_id(d, r1->session);
		noroom = cc ? cc->tier_noroom : 0;
		pthread_mutex_unlock(&d->lock);
	}
	CHECK(noroom && metric(d, "kvarenad_tier_prefetches_total") == 0,
	      "A's prefetch due %.0f ms into its %d ms wait: no room", now_ms() - *t0, a_ms);
	return noroom ? 0 : -1;
}

/*
 * A prefetch that is due and finds no room holds the room that comes free
 * for itself, before the turns of conversations that started after its
 * own, while a job runs (which gives room back). A waits on a tool of a
 * fixed duration, its KV on disk; the arena is held by a kvarena session
 * of the test's own but for one block less than A's restore needs. When A's
 * prefetch has come due and found no room, C (a later conversation)
 * runs, and B, a short first turn after it that fits in what is free,
 * must stay queued. Before, B was admitted, and in an eviction run such
 * turns took each block a reply gave back ahead of the prefetch, whose
 * tool's result then found its KV on disk (no_room: 10 of 22 stalls).
 * Once the room is back, A is prefetched before its return (no stall,
 * output bit-identical) and B runs.
 */
static void test_prefetch_first(void)
{
	const struct reply *ref = reference(0);
	const char *b_prompt = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n";
	const char *c_prompt = "<|im_start|>user\nwrite a long story<|im_end|>\n"
			       "<|im_start|>assistant\n";
	char *dir = new_dir("pfirst");
	struct kve_arena_session blk = { 0 };
	struct kvd_job *jb = NULL, *jc = NULL;
	struct kvd_config c;
	struct kvd_conv *cc;
	struct convo cv;
	struct reply r1, r2, rb, rc2;
	struct kvd *d;
	uint64_t turn0, turns = 0;
	double t0;
	int a_ms = slow(8000), opened = 0, b_queued = 0, c_runs = 0, a_disk = 0, i;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 0, ref_tool[0]);
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(2000);
	/* the room's order under test: a prefetch short of room, not of slack */
	c.tier_prefetch_slack = 0;
	d = start(&c);
	if (!d)
		goto out;
	if (short_of_room(d, &cv, a_ms, &r1, &t0, &blk, &opened))
		goto stop;
	/* C runs (nothing ran: it is admitted), then B comes */
	jc = submit(d, c_prompt, 64);
	for (i = 0; jc && i < 2000 && !c_runs; i++) {
		pthread_mutex_lock(&d->lock);
		c_runs = jc->state == JOB_RUNNING;
		pthread_mutex_unlock(&d->lock);
		if (!c_runs)
			msleep(1);
	}
	jb = submit(d, b_prompt, 4);
	pthread_mutex_lock(&d->lock);
	turn0 = d->n_step_us;
	pthread_mutex_unlock(&d->lock);
	for (i = 0; i < 3000 && turns < 8; i++) {
		msleep(2);
		pthread_mutex_lock(&d->lock);
		turns = d->n_step_us - turn0;
		pthread_mutex_unlock(&d->lock);
	}
	pthread_mutex_lock(&d->lock);
	b_queued = jb && jb->state == JOB_QUEUED;
	c_runs = jc && jc->state == JOB_RUNNING;
	cc = kvd_conv_find_id(d, r1.session);
	a_disk = cc && cc->tier_file && !cc->tier_op && (!cc->has_kv || !cc->as.s.n_blocks);
	pthread_mutex_unlock(&d->lock);
	CHECK(c_runs && b_queued && a_disk,
	      "%llu steps of C later B still waits behind A's due prefetch (B %s, C %s, A %s)",
	      (unsigned long long)turns, b_queued ? "queued" : "admitted",
	      c_runs ? "running" : "done", a_disk ? "on disk" : "?");
	/* the room comes back: A's prefetch takes it first */
	release_blocks(d, &blk, &opened);
	memset(&rb, 0, sizeof(rb));
	memset(&rc2, 0, sizeof(rc2));
	CHECK(jb && collect(jb, &rb) == 0 && rb.n_tokens > 0, "B runs after A's prefetch");
	jb = NULL;
	CHECK(jc && collect(jc, &rc2) == 0 && rc2.n_tokens > 0, "C completes");
	jc = NULL;
	CHECK(metric(d, "kvarenad_tier_prefetches_total") == 1 &&
	      !strcmp(tier_of(d, r1.session), "arena") && now_ms() - t0 < a_ms,
	      "A prefetched back %.0f ms into its %d ms wait", now_ms() - t0, a_ms);
	while (now_ms() - t0 < a_ms)
		msleep(20);
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref) &&
	      metric(d, "kvarenad_tier_restore_stalls_total") == 0,
	      "A's result finds its KV: no stall, output bit-identical (%llu stalls)",
	      (unsigned long long)metric(d, "kvarenad_tier_restore_stalls_total"));
stop:
	release_blocks(d, &blk, &opened);
	if (jb)
		collect(jb, &rb);
	if (jc)
		collect(jc, &rc2);
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * Agents' turns coming and going while A's KV waits on disk for its tool
 * (each a fresh conversation closed once answered, as a harness does):
 * the arena's inflow. Room for A's restore is free and 8 blocks more (a
 * session of the test's own holds the rest, until A's return), and the
 * turns fill more than those 8 before A's return. With the slack (the default) A's
 * prefetch is left to the return: counted, a no_slack stall, the reply
 * bit-identical. Taken early, the room would be the next turn's (which
 * evicts another conversation for it) while the read it saves is a few
 * ms (an eviction trial: 82-97 evictions against 43 so; tier.md). With
 * prefetch_slack = no, the same prefetch goes: no stall.
 */
static void slack_case(int slack)
{
	const struct reply *ref = reference(0);
	char *dir = new_dir(slack ? "pslack" : "pnoslack");
	struct kve_arena_session blk = { 0 };
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2, rt;
	struct kvd_conv *cc;
	struct kvd *d;
	char p[256];
	double t0;
	int a_ms = slow(5000), turns = 0, opened = 0, rc = -1;
	uint32_t need = 0, left = 0;
	uint64_t pf = 0, given_up = 0;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 0, ref_tool[0]);
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(1000);
	c.tier_prefetch_slack = slack;
	d = start(&c);
	if (!d)
		goto out;
	a_on_disk(d, &cv, a_ms, &r1, &t0);
	pthread_mutex_lock(&d->lock);
	cc = kvd_conv_find_id(d, r1.session);
	if (cc) {
		need = (cc->tier_file_tokens + d->geom.block_tokens - 1) / d->geom.block_tokens;
		left = kvd_blocks_free(d);
		if (left > need + 8)
			rc = hold_blocks(d, left - need - 8, &blk, &opened);
		left = kvd_blocks_free(d);
	}
	pthread_mutex_unlock(&d->lock);
	CHECK(rc == 0 && left == need + 8,
	      "the arena held elsewhere: %u blocks free, A's restore needs %u", left, need);
	/* turns come and go until A's prefetch is due and decided */
	while (now_ms() - t0 < a_ms - slow(300) && !pf && !given_up) {
		snprintf(p, sizeof(p), "<|im_start|>user\nturn %d: list the files and say which "
			 "changed<|im_end|>\n<|im_start|>assistant\n", turns++);
		if (ask(d, p, 1, &rt) == 0) {
			pthread_mutex_lock(&d->lock);
			cc = kvd_conv_find_id(d, rt.session);
			if (cc)
				kvd_conv_free(d, cc);	/* what DELETE does */
			pthread_mutex_unlock(&d->lock);
		}
		pf = metric(d, "kvarenad_tier_prefetches_total");
		given_up = metric(d, "kvarenad_tier_prefetches_deferred_total");
		msleep(5);
	}
	if (slack)
		CHECK(given_up == 1 && pf == 0 && !strcmp(tier_of(d, r1.session), "disk"),
		      "%d turns meanwhile: A's prefetch left to the return %.0f ms into its %d ms "
		      "wait (%llu given up, %llu prefetches)", turns, now_ms() - t0, a_ms,
		      (unsigned long long)given_up, (unsigned long long)pf);
	while (now_ms() - t0 < a_ms)
		msleep(20);
	if (!slack)
		CHECK(metric(d, "kvarenad_tier_prefetches_total") == 1 &&
		      metric(d, "kvarenad_tier_prefetches_deferred_total") == 0,
		      "prefetch_slack = no, %d turns meanwhile: A prefetched", turns);
	release_blocks(d, &blk, &opened);
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref),
	      "A's result: output bit-identical to the run without eviction");
	if (slack)
		CHECK(metric(d, "kvarenad_tier_restore_stall_causes_total{cause=\"no_slack\"}") == 1,
		      "read at the return: a no_slack stall");
	else
		CHECK(metric(d, "kvarenad_tier_restore_stalls_total") == 0,
		      "no stall: the KV was back");
	release_blocks(d, &blk, &opened);
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

static void test_prefetch_slack(void)
{
	slack_case(1);
	slack_case(0);
}

/*
 * A tool's result that finds its KV on disk after its prefetch found no
 * room is a no_room stall, and the daemon says where the arena's blocks
 * were at that return (tiering.c, room_census): here, held by a kvarena
 * session of the test's own, so free (one block short of A's restore)
 * and no conversation's; none idle and back later (a prefetch would
 * have taken those). Once the room is back A is restored, bit-identical.
 */
static void test_room_census(void)
{
	const struct reply *ref = reference(0);
	char *dir = new_dir("census"), *txt = NULL, want[160];
	struct kve_arena_session blk = { 0 };
	struct kvd_job *ja = NULL;
	struct kvd_config c;
	struct convo cv;
	struct reply r1, r2;
	struct kvd *d;
	uint64_t census[KVD_ROOM_HOLDERS] = { 0 }, returns = 0, causes = 0, convs = 0;
	uint32_t left = 0, k;
	double t0;
	int a_ms = slow(4000), opened = 0, i;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 0, ref_tool[0]);
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(2000);
	/* the room's order under test: a prefetch short of room, not of slack */
	c.tier_prefetch_slack = 0;
	d = start(&c);
	if (!d)
		goto out;
	if (short_of_room(d, &cv, a_ms, &r1, &t0, &blk, &opened))
		goto stop;
	pthread_mutex_lock(&d->lock);
	left = kvd_blocks_free(d);
	pthread_mutex_unlock(&d->lock);
	while (now_ms() - t0 < a_ms)
		msleep(20);
	/* the tool's result: A's turn finds its KV on disk, no room */
	ja = submit(d, cv.p2, 24);
	for (i = 0; ja && i < 2000 && !returns; i++) {
		msleep(2);
		pthread_mutex_lock(&d->lock);
		returns = d->m.tier_noroom_returns;
		pthread_mutex_unlock(&d->lock);
	}
	txt = kvd_metrics_text(d);
	pthread_mutex_lock(&d->lock);
	memcpy(census, d->m.tier_noroom_blocks, sizeof(census));
	for (k = KVD_ROOM_RUNNING; k < KVD_ROOM_HOLDERS; k++)
		convs += census[k];
	pthread_mutex_unlock(&d->lock);
	snprintf(want, sizeof(want), "kvarenad_tier_no_room_blocks_total{holder=\"free\"} %u\n",
		 left);
	CHECK(returns == 1 && census[KVD_ROOM_FREE] == left && !convs && txt &&
	      strstr(txt, want) && strstr(txt, "kvarenad_tier_no_room_returns_total 1\n"),
	      "the return's census: %llu returns, %llu free (%u), %llu in conversations, "
	      "%llu idle back later", (unsigned long long)returns,
	      (unsigned long long)census[KVD_ROOM_FREE], left, (unsigned long long)convs,
	      (unsigned long long)census[KVD_ROOM_LATER]);
	free(txt);
	/* the room comes back: restored, not recomputed */
	release_blocks(d, &blk, &opened);
	memset(&r2, 0, sizeof(r2));
	CHECK(ja && collect(ja, &r2) == 0 && same_reply(&r2, ref), "A's reply, bit-identical");
	ja = NULL;
	pthread_mutex_lock(&d->lock);
	causes = d->m.tier_stall_causes[KVD_STALL_NO_ROOM];
	pthread_mutex_unlock(&d->lock);
	CHECK(causes == 1 && metric(d, "kvarenad_tier_recomputed_tokens_total") == 0,
	      "one no_room stall, nothing recomputed (%llu)", (unsigned long long)causes);
stop:
	release_blocks(d, &blk, &opened);
	if (ja)
		collect(ja, &r2);
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * A prefetch due while a job admitted now would still hold its blocks
 * keeps its room from the turns of later conversations (admit.c,
 * kvd_tiering_reserve). A waits on a tool of a fixed 8 s, its KV on disk,
 * its prefetch due seconds later; the arena is held but for A's restore
 * and a few blocks; C (a later conversation) runs; jobs hold their
 * blocks about as long as A's wait (hold_ns, set: the daemon measures it
 * from the jobs that end). B, a short first turn after C, fits in what is
 * free, but not beside A's restore: it waits, A's prefetch finds its room
 * when due, B runs after it, and A's result finds its KV. Before, B was
 * admitted and, in a 100-agent pilot, such first turns held the room
 * through their prefill and decode, tens of seconds, while the prefetch
 * due found none (no_room: 51 of 69 restore stalls).
 */
static void test_prefetch_reserve(void)
{
	const struct reply *ref = reference(0);
	const char *b_prompt = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n";
	const char *c_prompt = "<|im_start|>user\nwrite a long story<|im_end|>\n"
			       "<|im_start|>assistant\n";
	char *dir = new_dir("preserve");
	struct kve_arena_session blk = { 0 };
	struct kvd_job *jb = NULL, *jc = NULL;
	struct kvd_config c;
	struct kvd_conv *cc;
	struct convo cv;
	struct reply r1, r2, rb, rc2;
	struct kvd *d;
	uint32_t bt, need = 0, left = 0, hold = 0, reserve = 0;
	uint64_t turn0, turns = 0, given0 = 0, given;
	double t0;
	int a_ms = slow(8000), rc = -1, opened = 0, b_queued = 0, c_runs = 0, a_disk = 0, i;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 0, ref_tool[0]);
	base_config(&c, dir);
	c.tier_margin_ms = (uint32_t)slow(2000);
	/* the room's order under test: a prefetch short of room, not of slack */
	c.tier_prefetch_slack = 0;
	d = start(&c);
	if (!d)
		goto out;
	a_on_disk(d, &cv, a_ms, &r1, &t0);
	/* C runs (nothing ran: admitted whatever is due) */
	jc = submit(d, c_prompt, 64);
	for (i = 0; jc && i < 2000 && !c_runs; i++) {
		pthread_mutex_lock(&d->lock);
		c_runs = jc->state == JOB_RUNNING;
		pthread_mutex_unlock(&d->lock);
		if (!c_runs)
			msleep(1);
	}
	/* all but A's restore and a few blocks (C's decode grows into them)
	 * held; jobs measured to hold their blocks as long as A's wait */
	pthread_mutex_lock(&d->lock);
	bt = d->geom.block_tokens;
	cc = kvd_conv_find_id(d, r1.session);
	if (cc) {
		need = (cc->tier_file_tokens + bt - 1) / bt;
		left = kvd_blocks_free(d);
		hold = left > need + 5 ? left - (need + 5) : 0;
		rc = hold_blocks(d, hold, &blk, &opened);
		left = kvd_blocks_free(d);
	}
	d->hold_ns = (uint64_t)a_ms * 1000000ull;
	pthread_mutex_unlock(&d->lock);
	CHECK(c_runs && rc == 0 && hold && left == need + 5,
	      "C runs; the arena held elsewhere: %u blocks free, A's restore needs %u", left,
	      need);
	if (rc)
		goto stop;
	given0 = metric(d, "kvarenad_admit_kv_given_back_total");
	jb = submit(d, b_prompt, 4);
	pthread_mutex_lock(&d->lock);
	turn0 = d->n_step_us;
	pthread_mutex_unlock(&d->lock);
	for (i = 0; i < 3000 && turns < 8; i++) {
		msleep(2);
		pthread_mutex_lock(&d->lock);
		turns = d->n_step_us - turn0;
		pthread_mutex_unlock(&d->lock);
	}
	pthread_mutex_lock(&d->lock);
	b_queued = jb && jb->state == JOB_QUEUED;
	c_runs = jc && jc->state == JOB_RUNNING;
	reserve = d->prefetch_reserve;
	cc = kvd_conv_find_id(d, r1.session);
	a_disk = cc && cc->tier_file && !cc->tier_op && (!cc->has_kv || !cc->as.s.n_blocks) &&
		 !cc->tier_noroom;
	pthread_mutex_unlock(&d->lock);
	CHECK(b_queued && a_disk && reserve == need,
	      "%llu steps later (%.0f ms into A's wait, C %s) B waits: %u blocks kept for A's "
	      "prefetch, not due yet (B %s, A %s)", (unsigned long long)turns, now_ms() - t0,
	      c_runs ? "running" : "done", reserve, b_queued ? "queued" : "admitted",
	      a_disk ? "on disk" : "?");
	/* told so before its KV session is opened: a turn does not open
	 * and give back a session for each job waiting beside the reserve */
	given = metric(d, "kvarenad_admit_kv_given_back_total") - given0;
	CHECK(b_queued && given == 0,
	      "B's KV session not opened to be given back while it waits (%llu given back in "
	      "%llu turns)", (unsigned long long)given, (unsigned long long)turns);
	memset(&rb, 0, sizeof(rb));
	memset(&rc2, 0, sizeof(rc2));
	CHECK(jc && collect(jc, &rc2) == 0 && rc2.n_tokens > 0, "C completes");
	jc = NULL;
	CHECK(jb && collect(jb, &rb) == 0 && rb.n_tokens > 0, "B runs");
	jb = NULL;
	for (i = 0; i < a_ms / 10 && metric(d, "kvarenad_tier_prefetches_total") == 0; i++)
		msleep(10);
	CHECK(metric(d, "kvarenad_tier_prefetches_total") == 1 &&
	      !strcmp(tier_of(d, r1.session), "arena") && now_ms() - t0 < a_ms,
	      "A prefetched back %.0f ms into its %d ms wait", now_ms() - t0, a_ms);
	/* the rest of the arena back for A's reply */
	release_blocks(d, &blk, &opened);
	while (now_ms() - t0 < a_ms)
		msleep(20);
	CHECK(ask(d, cv.p2, 24, &r2) == 0 && same_reply(&r2, ref) &&
	      metric(d, "kvarenad_tier_restore_stalls_total") == 0,
	      "A's result finds its KV: no stall, output bit-identical (%llu stalls)",
	      (unsigned long long)metric(d, "kvarenad_tier_restore_stalls_total"));
stop:
	release_blocks(d, &blk, &opened);
	if (jb)
		collect(jb, &rb);
	if (jc)
		collect(jc, &rc2);
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/* Blocks free in the arena. */
static uint32_t free_blocks(struct kvd *d)
{
	uint32_t f;

	pthread_mutex_lock(&d->lock);
	f = kvd_blocks_free(d);
	pthread_mutex_unlock(&d->lock);
	return f;
}

/* The conversation's blocks in the arena. */
static uint32_t conv_blocks(struct kvd *d, const char *session)
{
	struct kvd_conv *c;
	uint32_t n = 0;

	pthread_mutex_lock(&d->lock);
	c = kvd_conv_find_id(d, session);
	if (c && c->has_kv)
		n = c->as.s.n_blocks;
	pthread_mutex_unlock(&d->lock);
	return n;
}

/*
 * A prefetch takes free room, or the room of conversations expected back
 * later than its own, never that of one expected back sooner (tier.md,
 * "Prefetch"). P (a tool of a fixed 28 s) is spilled and evicted; then S1
 * and S2 (tools of a fixed 18 s, started after P's: back 1-10 s before
 * it, whatever the load makes of their first turns) fill the arena so
 * that P's prefetch, due at its 5% quantile less the margin (about 15 s
 * into P's wait), finds less free than it needs.
 * Taking S1's or S2's room (the kernel's ranking, before) evicted KV that
 * was needed first: S1 and S2 were then restored on demand, stalling. Now
 * P's prefetch waits; S1 and S2 return to their KV, reply and are idle
 * (not waiting on a tool: expected back after P), and P's prefetch takes
 * their room, so P is back before its result too: no stall at all.
 */
static void test_prefetch_order(void)
{
	char *dir = new_dir("order");
	struct kvd_config c, nc;
	struct convo *cv = calloc(3, sizeof(*cv));	/* P, S1, S2 */
	struct reply r1[3], r2;
	double tp, ts, ts1 = 0;
	uint32_t need, free_at;
	char err[256];
	struct kvd *d;
	int p_ms = slow(28000), s_ms = slow(18000), k, ok = 0;

	if (!dir || !cv) {
		free(cv);
		free(dir);
		return;
	}
	make_convo_n(&cv[0], 1, "compile", 12);
	make_convo_n(&cv[1], 2, "grep", 6);
	make_convo_n(&cv[2], 3, "quick_read", 6);
	base_config(&c, dir);
	c.kv_blocks = 64;			/* one 2 MiB page */
	c.tier_margin_ms = (uint32_t)slow(2000);
	d = start(&c);
	if (!d)
		goto out;
	train_class(d, "compile", (uint64_t)p_ms * 1000);
	train_class(d, "grep", (uint64_t)s_ms * 1000);
	train_class(d, "quick_read", (uint64_t)s_ms * 1000);
	/* P: spilled under the forced pressure, then evicted */
	script(d, cv[0].call);
	CHECK(ask(d, cv[0].p1, 8, &r1[0]) == 0, "P calls a tool of %d ms", p_ms);
	tp = now_ms();
	need = conv_blocks(d, r1[0].session);
	CHECK(await_metric(d, "kvarenad_tier_spills_total", 1, p_ms / 4), "P written to disk");
	demand(d);
	CHECK(!strcmp(tier_of(d, r1[0].session), "disk"), "P evicted: on disk only (%u blocks)",
	      need);
	/* no pressure from here on: S1 and S2 keep their KV */
	pthread_mutex_lock(&d->lock);
	nc = d->cfg;
	nc.low_wm = 1;
	nc.high_wm = 2;
	if (kvd_tiering_reload(d, &nc, err, sizeof(err)))
		printf("reload: %s\n", err);
	pthread_mutex_unlock(&d->lock);
	for (k = 1; k < 3; k++) {
		script(d, cv[k].call);
		ok += ask(d, cv[k].p1, 8, &r1[k]) == 0;
		if (k == 1)
			ts1 = now_ms();
	}
	ts = now_ms();
	free_at = free_blocks(d);
	CHECK(ok == 2 && free_at < need && ts - tp < p_ms - s_ms - slow(1000),
	      "S1 and S2 wait on tools back about %d ms before P's; %u blocks free, P needs %u "
	      "(arena %u)", p_ms - s_ms - (int)(ts - tp), free_at, need, d->geom.blocks_total);
	/* P's prefetch comes due while S1 and S2 wait; their results come
	 * s_ms after S1's call (S2's a little early): from S2's, S1's tool
	 * ran past its prediction and the margin when S2's first turn took
	 * seconds (a loaded machine), was re-predicted back after P and so
	 * was P's room (2 evictions, 2 prefetches; seen at load 7) */
	while (now_ms() - ts1 < s_ms)
		msleep(20);
	CHECK(!strcmp(tier_of(d, r1[1].session), "arena") &&
	      !strcmp(tier_of(d, r1[2].session), "arena") &&
	      metric(d, "kvarenad_evictions_total") == 1,
	      "S1 and S2 still in the arena when their tools return (tiers %s, %s; %llu "
	      "evictions: P's alone)", tier_of(d, r1[1].session), tier_of(d, r1[2].session),
	      (unsigned long long)metric(d, "kvarenad_evictions_total"));
	ok = 0;
	for (k = 1; k < 3; k++)
		ok += ask(d, cv[k].p2, 24, &r2) == 0 && r2.n_tokens > 0;
	CHECK(ok == 2 && metric(d, "kvarenad_tier_restore_stalls_total") == 0 &&
	      metric(d, "kvarenad_kv_misses_total") == 0,
	      "S1 and S2 continue without a stall (%llu stalls, %llu misses)",
	      (unsigned long long)metric(d, "kvarenad_tier_restore_stalls_total"),
	      (unsigned long long)metric(d, "kvarenad_kv_misses_total"));
	/* P's result comes at its time, or once P is back when the replies
	 * above ran past it (a loaded machine): back is read and verified,
	 * not only its blocks taken (tier arena while the read is in flight:
	 * a result then waits for the read, a stall; seen with the suite in
	 * three processes at once) */
	ts = now_ms();
	while ((now_ms() - tp < p_ms || strcmp(tier_of(d, r1[0].session), "arena") ||
		metric(d, "kvarenad_tier_restores_total") < 1) &&
	       now_ms() - ts < p_ms)
		msleep(20);
	CHECK(!strcmp(tier_of(d, r1[0].session), "arena") &&
	      metric(d, "kvarenad_tier_prefetches_total") == 1,
	      "P prefetched into their room once they were idle: tier %s %.0f ms into its "
	      "%d ms wait (%llu prefetches)", tier_of(d, r1[0].session), now_ms() - tp, p_ms,
	      (unsigned long long)metric(d, "kvarenad_tier_prefetches_total"));
	CHECK(ask(d, cv[0].p2, 24, &r2) == 0 && r2.n_tokens > 0 &&
	      metric(d, "kvarenad_tier_restore_stalls_total") == 0,
	      "P continues without a stall either");
	stop(d);
out:
	rm_rf(dir);
	free(dir);
	free(cv);
}

/*
 * A restore on demand that finds no room is a job lacking room: it holds
 * admission behind it, as a prompt that does not fit does, so that later
 * arrivals do not take the room it waits for. (Before, it let them pass:
 * in an eviction trial, stalled restores of 57 ms waited 41 s for room
 * that first turns queued after them kept taking.) A's KV is on disk; the
 * arena is filled by a kvarena session of the test's own (another user
 * of the arena: nothing the daemon may evict) to leave half of what A's
 * restore needs, room enough for B, a short request that comes after A's
 * tool result. B must not run while A waits; once the room is back, A is
 * restored (output bit-identical) and B runs too.
 */
static void test_restore_first(void)
{
	const struct reply *ref = reference(0);
	char *dir = new_dir("first");
	struct kve_arena_session blk = { 0 };
	const char *b_prompt = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n";
	struct kvd_job *ja = NULL, *jb = NULL;
	struct kvd_config c;
	struct kvd_conv *cc;
	struct convo cv;
	struct reply r1, ra, rb;
	struct kvd *d;
	uint32_t bt, need = 0, left = 0, hold = 0;
	uint64_t turn0, turns = 0;
	int rc = -1, opened = 0, b_queued = 0, a_disk = 0, i;

	if (!ref || !dir) {
		free(dir);
		return;
	}
	make_convo(&cv, 0, ref_tool[0]);
	base_config(&c, dir);
	c.tier_prefetch = 0;		/* on demand: the return restores it */
	d = start(&c);
	if (!d)
		goto out;
	script(d, cv.call);
	CHECK(ask(d, cv.p1, 8, &r1) == 0 &&
	      await_metric(d, "kvarenad_tier_spills_total", 1, 20000), "A waits on a tool, spilled");
	demand(d);
	CHECK(!strcmp(tier_of(d, r1.session), "disk"), "A evicted: its KV on disk only");
	/* the arena full but for half of what A's restore needs */
	pthread_mutex_lock(&d->lock);
	bt = d->geom.block_tokens;
	cc = kvd_conv_find_id(d, r1.session);
	if (cc) {
		need = (cc->tier_file_tokens + bt - 1) / bt;
		left = kvd_blocks_free(d);
		hold = left > need / 2 ? left - need / 2 : 0;
		rc = hold_blocks(d, hold, &blk, &opened);
		left = kvd_blocks_free(d);
	}
	pthread_mutex_unlock(&d->lock);
	CHECK(rc == 0 && hold && left < need && left >= 4,
	      "the arena held elsewhere: %u blocks free, A's restore needs %u", left, need);
	if (rc)
		goto stop;
	/* A's tool result: its restore finds no room (a miss, no restore) */
	ja = submit(d, cv.p2, 24);
	CHECK(ja && await_metric(d, "kvarenad_kv_misses_total", 1, 20000) &&
	      metric(d, "kvarenad_tier_restores_total") == 0,
	      "A's tool result arrives: its KV is needed, its restore waits for room");
	/* B after it: a short first turn that fits in what is free */
	jb = submit(d, b_prompt, 4);
	pthread_mutex_lock(&d->lock);
	turn0 = d->n_step_us;
	pthread_mutex_unlock(&d->lock);
	for (i = 0; i < 3000 && turns < 8; i++) {
		msleep(10);
		pthread_mutex_lock(&d->lock);
		turns = d->n_step_us - turn0;
		pthread_mutex_unlock(&d->lock);
	}
	pthread_mutex_lock(&d->lock);
	b_queued = jb && jb->state == JOB_QUEUED;
	cc = kvd_conv_find_id(d, r1.session);
	a_disk = cc && cc->tier_file && !cc->tier_op && (!cc->has_kv || !cc->as.s.n_blocks);
	pthread_mutex_unlock(&d->lock);
	CHECK(jb && turns >= 8 && b_queued && a_disk,
	      "%llu scheduler turns later B still waits behind A's restore (B %s, A %s)",
	      (unsigned long long)turns, b_queued ? "queued" : "admitted", a_disk ? "on disk" : "?");
	/* the room comes back */
	release_blocks(d, &blk, &opened);
	memset(&ra, 0, sizeof(ra));
	memset(&rb, 0, sizeof(rb));
	CHECK(ja && collect(ja, &ra) == 0 && same_reply(&ra, ref),
	      "A restored once there is room: output bit-identical to the run without eviction");
	ja = NULL;
	CHECK(jb && collect(jb, &rb) == 0 && rb.n_tokens > 0, "B runs after it");
	jb = NULL;
	CHECK(metric(d, "kvarenad_tier_restores_total") == 1 &&
	      metric(d, "kvarenad_tier_restore_stalls_total") == 1 &&
	      metric(d, "kvarenad_tier_recomputed_tokens_total") == 0,
	      "one restore, one stall, nothing recomputed");
stop:
	release_blocks(d, &blk, &opened);
	if (ja)
		collect(ja, &ra);
	if (jb)
		collect(jb, &rb);
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * A client's tool wait ends when its result arrives, not when the server
 * gets round to it: a request queued behind others (here: the scheduler
 * kept from admitting it for 800 ms) does not make the tool look slower,
 * which would lengthen every later prediction of its class (and so the
 * KV kept, spilled or prefetched for it).
 */
static void test_wait_at_arrival(void)
{
	struct kvd_config c;
	struct kvd_request rq = { 0 };
	struct kvd_error err;
	struct kvd_event ev;
	struct kvd_job *j = NULL;
	struct convo cv;
	struct reply r1;
	struct kvd *d;
	uint64_t n_before, ms_before;
	int tries, queued = 0, tool_ms = slow(300), held_ms = slow(800);

	base_config(&c, NULL);
	d = start(&c);
	if (!d)
		return;
	for (tries = 0; tries < 10 && !queued; tries++) {
		make_convo(&cv, 10 + tries, "bisect");
		script(d, cv.call);
		if (ask(d, cv.p1, 8, &r1))
			break;
		n_before = metric(d, "kvarenad_tool_wait_ms_count");
		ms_before = metric(d, "kvarenad_tool_wait_ms_sum");
		msleep(tool_ms);	/* the client's tool runs */
		rq.model = "test";
		rq.prompt = cv.p2;
		rq.prompt_len = strlen(cv.p2);
		rq.s.top_p = 1;
		rq.s.has_seed = 1;
		rq.s.max_tokens = 4;
		if (kvd_job_submit(d, &rq, &j, &err)) {
			printf("submit: %s\n", err.message);
			break;
		}
		/* the scheduler must not have admitted it yet (else try again) */
		pthread_mutex_lock(&d->lock);
		queued = j->state == JOB_QUEUED;
		if (queued)
			msleep(held_ms);
		pthread_mutex_unlock(&d->lock);
		while (kvd_job_next(j, &ev, 120000) == 1 && ev.type == KVD_EV_TOKEN)
			;
		kvd_job_free(j);
	}
	CHECK(queued, "a tool result queued %d ms before admission (try %d)", held_ms, tries);
	if (queued) {
		uint64_t n = metric(d, "kvarenad_tool_wait_ms_count") - n_before;
		uint64_t ms = metric(d, "kvarenad_tool_wait_ms_sum") - ms_before;

		CHECK(n == 1 && ms >= (uint64_t)tool_ms && ms < (uint64_t)(tool_ms + held_ms / 2),
		      "the tool wait recorded: %llu ms (the tool %d ms, then %d ms queued)",
		      (unsigned long long)ms, tool_ms, held_ms);
	}
	stop(d);
}

/* The reference for two agents on one system prompt: A's first turn,
 * B's, B's second, on a daemon with the prefix cache and no tier. */
static int shared_reference(const struct convo *a, const struct convo *b, struct reply *ra,
			    struct reply *rb, struct reply *ref)
{
	struct kvd_config c;
	struct kvd *d;

	base_config(&c, NULL);
	c.prefix_cache = 1;
	d = start(&c);
	if (!d)
		return -1;
	script(d, a->call);
	ask(d, a->p1, 8, ra);
	script(d, b->call);
	ask(d, b->p1, 8, rb);
	ask(d, b->p2, 24, ref);
	stop(d);
	return 0;
}

/*
 * Agents sharing a long system prompt: the blocks every conversation
 * holds through the prefix cache are not written (they stay in the arena
 * and are shared again at restore); only a conversation's own are. Two
 * conversations on one prompt; the second spilled, evicted, restored:
 * output bit-identical to a daemon that never evicts (same prefix cache).
 */
static void test_shared_prefix(void)
{
	char *dir = new_dir("shared");
	struct kvd_config c;
	struct convo a, b;
	struct reply ra, rb, ref, r2;
	uint64_t bytes = 0;
	struct kvd *d;
	int i;

	if (!dir)
		return;
	make_convo(&a, 6, "grep");
	make_convo(&b, 7, "grep");
	/* the same system prompt: the first conversation's user turn becomes
	 * everybody's system prompt */
	for (i = 0; i < 2; i++) {
		struct convo *cv = i ? &b : &a;
		char body[8192];
		const char *u = strstr(a.p1, "<|im_start|>user\n");

		snprintf(body, sizeof(body), "<|im_start|>system\nshared rules: %.*s<|im_end|>\n"
			 "<|im_start|>user\nagent %d: go<|im_end|>\n<|im_start|>assistant\n",
			 (int)(strlen(u) > 2200 ? 2200 : strlen(u)), u, i);
		snprintf(cv->p1, sizeof(cv->p1), "%s", body);
		snprintf(cv->p2, sizeof(cv->p2), "%s%s<|im_end|>\n<|im_start|>tool\n"
			 "<tool_response>\nresult %d<|im_end|>\n<|im_start|>assistant\n", cv->p1,
			 cv->call, i);
	}
	if (shared_reference(&a, &b, &ra, &rb, &ref))
		goto out;
	base_config(&c, dir);
	c.prefix_cache = 1;
	c.tier_prefetch = 0;
	d = start(&c);
	if (!d)
		goto out;
	script(d, a.call);
	ask(d, a.p1, 8, &ra);
	script(d, b.call);
	ask(d, b.p1, 8, &rb);
	CHECK(rb.usage.cached_tokens >= 5 * d->geom.block_tokens,
	      "the second agent shares the system prompt's blocks (%u tokens)",
	      rb.usage.cached_tokens);
	CHECK(await_metric(d, "kvarenad_tier_spills_total", 2, 20000), "both written behind");
	count_files(dir, ".kvspill", &bytes);
	{
		uint32_t bt = d->geom.block_tokens;
		uint64_t full = 2 * (4096 + (uint64_t)((rb.usage.prompt_tokens + bt - 1) / bt) *
				d->geom.block_size);

		CHECK(bytes + (uint64_t)(rb.usage.cached_tokens / bt) * d->geom.block_size <= full,
		      "the shared blocks are written once at most: %llu bytes on disk for two "
		      "conversations of %u tokens (%llu if each wrote its whole KV)",
		      (unsigned long long)bytes, rb.usage.prompt_tokens, (unsigned long long)full);
	}
	/* the first agent leaves; the arena then needs exactly the second
	 * one's own blocks (the shared ones stay, held by the cache) */
	CHECK(kvd_session_delete(d, ra.session, 0) == 0, "the first agent's conversation deleted");
	{
		struct kvd_conv *cb;
		uint32_t own = 0;

		pthread_mutex_lock(&d->lock);
		cb = kvd_conv_find_id(d, rb.session);
		if (cb)
			own = cb->as.s.n_blocks - cb->tier_file_skip;
		kvd_make_room(d, kvd_blocks_free(d) + own);
		pthread_mutex_unlock(&d->lock);
	}
	CHECK(!strcmp(tier_of(d, rb.session), "disk"), "evicted: on disk");
	CHECK(ask(d, b.p2, 24, &r2) == 0 && same_reply(&r2, &ref),
	      "restored (the shared blocks from the prefix cache, its own from the file): "
	      "output bit-identical to the run without eviction");
	CHECK(metric(d, "kvarenad_tier_restore_cached_tokens_total") >= 5 * d->geom.block_tokens,
	      "%llu restored tokens shared from the cache, not read",
	      (unsigned long long)metric(d, "kvarenad_tier_restore_cached_tokens_total"));
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/* Agent k on a system prompt every shared_convo() has (~16 blocks), its
 * own user turn ~12 blocks: the call, then its result. */
static void shared_convo(struct convo *cv, int k, const char *tool)
{
	struct convo own, sys;
	const char *u, *su;

	make_convo_n(&sys, 99, "none", 10);
	make_convo_n(&own, k, tool, 4);
	su = strstr(sys.p1, "<|im_start|>user\n") + strlen("<|im_start|>user\n");
	u = strstr(own.p1, "<|im_start|>user\n");
	snprintf(cv->p1, sizeof(cv->p1), "<|im_start|>system\nshared rules: %.600s<|im_end|>\n%s",
		 su, u);
	snprintf(cv->call, sizeof(cv->call), "%s", own.call);
	snprintf(cv->p2, sizeof(cv->p2), "%s%s<|im_end|>\n<|im_start|>tool\n<tool_response>\n"
		 "result %d: 42 files, 3 failures<|im_end|>\n<|im_start|>assistant\n", cv->p1,
		 cv->call, k);
}

/*
 * A restore that finds no room keeps the prefix cache's blocks it
 * attached and goes on from them: holding them, the conversation looked
 * restored to the next try (blocks in the arena), which dropped the
 * spill file and recomputed all but the shared prefix, counted nowhere
 * (in an eviction trial 66 of toolwait's 124 resumed turns recomputed
 * ~1.8k tokens each, its metrics saying 0 recomputed). Two agents on one system prompt, B
 * spilled and evicted (its own blocks on disk, the shared ones cached);
 * the arena held elsewhere but for half of B's own blocks; B's tool
 * result waits several scheduler turns for room, then the room comes
 * back: B is restored from the file, once, nothing recomputed, output
 * bit-identical to a daemon that never evicts.
 */
static void test_restore_shared(void)
{
	char *dir = new_dir("rshared");
	struct kve_arena_session blk = { 0 };
	struct kvd_config c;
	struct convo a, b;
	struct reply ra, rb, ref, r2;
	struct kvd_job *jb = NULL;
	struct kvd_conv *cb;
	struct kvd *d;
	uint32_t own = 0, left = 0, hold = 0;
	uint64_t turn0, turns = 0;
	int i, rc = -1, opened = 0, waiting;

	if (!dir)
		return;
	shared_convo(&a, 8, "grep");
	shared_convo(&b, 9, "grep");
	if (shared_reference(&a, &b, &ra, &rb, &ref))
		goto out;
	base_config(&c, dir);
	c.prefix_cache = 1;
	c.tier_prefetch = 0;		/* on demand: the return restores it */
	d = start(&c);
	if (!d)
		goto out;
	script(d, a.call);
	ask(d, a.p1, 8, &ra);
	script(d, b.call);
	ask(d, b.p1, 8, &rb);
	CHECK(rb.usage.cached_tokens >= 4 * d->geom.block_tokens &&
	      await_metric(d, "kvarenad_tier_spills_total", 2, 20000),
	      "two agents share the system prompt (%u tokens), both written behind",
	      rb.usage.cached_tokens);
	CHECK(kvd_session_delete(d, ra.session, 0) == 0, "the first agent's conversation deleted");
	pthread_mutex_lock(&d->lock);
	cb = kvd_conv_find_id(d, rb.session);
	if (cb) {
		own = cb->as.s.n_blocks - cb->tier_file_skip;
		kvd_make_room(d, kvd_blocks_free(d) + own);
	}
	pthread_mutex_unlock(&d->lock);
	CHECK(own >= 4 && !strcmp(tier_of(d, rb.session), "disk"),
	      "B evicted: its own %u blocks on disk, the shared ones cached", own);
	/* the arena held elsewhere but for half of B's own blocks */
	pthread_mutex_lock(&d->lock);
	left = kvd_blocks_free(d);
	hold = left > own / 2 ? left - own / 2 : 0;
	rc = hold_blocks(d, hold, &blk, &opened);
	left = kvd_blocks_free(d);
	pthread_mutex_unlock(&d->lock);
	CHECK(rc == 0 && hold && left < own, "%u blocks free, B's own KV is %u", left, own);
	if (rc)
		goto stop;
	jb = submit(d, b.p2, 24);
	CHECK(jb && await_metric(d, "kvarenad_kv_misses_total", 1, 20000),
	      "B's tool result arrives: its KV is needed, its restore waits for room");
	/* several tries of the restore while the room is lacking */
	pthread_mutex_lock(&d->lock);
	turn0 = d->n_step_us;
	pthread_mutex_unlock(&d->lock);
	for (i = 0; i < 3000 && turns < 8; i++) {
		msleep(10);
		pthread_mutex_lock(&d->lock);
		turns = d->n_step_us - turn0;
		pthread_mutex_unlock(&d->lock);
	}
	pthread_mutex_lock(&d->lock);
	cb = kvd_conv_find_id(d, rb.session);
	waiting = cb && cb->tier_file && !cb->tier_op;
	pthread_mutex_unlock(&d->lock);
	CHECK(turns >= 8 && waiting, "%llu scheduler turns later B's restore still waits, its spill "
	      "file kept", (unsigned long long)turns);
	release_blocks(d, &blk, &opened);
	memset(&r2, 0, sizeof(r2));
	CHECK(jb && collect(jb, &r2) == 0 && same_reply(&r2, &ref),
	      "B restored once there is room: output bit-identical to the run without eviction");
	jb = NULL;
	CHECK(metric(d, "kvarenad_tier_restores_total") == 1 &&
	      metric(d, "kvarenad_tier_recomputed_tokens_total") == 0 &&
	      r2.usage.cached_tokens >= rb.usage.prompt_tokens,
	      "restored from the file, not recomputed: %llu restores, %u prompt tokens cached "
	      "(the first turn's were %u)",
	      (unsigned long long)metric(d, "kvarenad_tier_restores_total"),
	      r2.usage.cached_tokens, rb.usage.prompt_tokens);
stop:
	release_blocks(d, &blk, &opened);
	if (jb)
		collect(jb, &r2);
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * A prefetch makes room only from KV expected back later, also when the
 * prefix cache has lost blocks its spill file skipped (shared then): it
 * needs those too, and counted from the file's skip it found "enough"
 * free room, then its restore made the rest by the kernel's ranking,
 * evicting S, a conversation due back sooner. B (a 28 s tool) and A
 * share a system prompt; B is spilled and evicted, A deleted, the cache
 * emptied; S (an 18 s tool, started after B's) keeps its KV; the arena
 * is held elsewhere but for B's own blocks and half of the lost ones.
 * B's prefetch comes due while S waits: S must keep its KV and return
 * without a miss.
 */
static void test_lost_shared(void)
{
	char *dir = new_dir("lostpfx");
	struct kve_arena_session blk = { 0 };
	struct kvd_config c, nc;
	struct convo a, b, s;
	struct reply ra, rb, rs, r2;
	struct kvd_conv *cb;
	char err[256];
	struct kvd *d;
	uint32_t own = 0, skip = 0, left = 0, hold = 0;
	double tp, ts;
	int rc = -1, opened = 0, p_ms = slow(28000), s_ms = slow(18000);

	if (!dir)
		return;
	shared_convo(&a, 10, "compile");
	shared_convo(&b, 11, "compile");
	make_convo_n(&s, 12, "grep", 4);
	base_config(&c, dir);
	c.prefix_cache = 1;
	c.tier_margin_ms = (uint32_t)slow(2000);
	d = start(&c);
	if (!d)
		goto out;
	train_class(d, "compile", (uint64_t)p_ms * 1000);
	train_class(d, "grep", (uint64_t)s_ms * 1000);
	script(d, a.call);
	ask(d, a.p1, 8, &ra);
	script(d, b.call);
	CHECK(ask(d, b.p1, 8, &rb) == 0 && await_metric(d, "kvarenad_tier_spills_total", 2, 20000),
	      "A and B share a system prompt and wait on tools, written behind");
	tp = now_ms();
	CHECK(kvd_session_delete(d, ra.session, 0) == 0, "A deleted");
	pthread_mutex_lock(&d->lock);
	cb = kvd_conv_find_id(d, rb.session);
	if (cb) {
		skip = cb->tier_file_skip;
		own = cb->as.s.n_blocks - skip;
		kvd_make_room(d, kvd_blocks_free(d) + own);
	}
	kvd_prefix_evict(d, d->geom.blocks_total);	/* the shared blocks too */
	nc = d->cfg;			/* no pressure from here on */
	nc.low_wm = 1;
	nc.high_wm = 2;
	if (kvd_tiering_reload(d, &nc, err, sizeof(err)))
		printf("reload: %s\n", err);
	pthread_mutex_unlock(&d->lock);
	CHECK(skip >= 4 && !strcmp(tier_of(d, rb.session), "disk") &&
	      metric(d, "kvarenad_kv_blocks_cached") == 0,
	      "B evicted (%u own blocks on disk, %u shared skipped), the cache emptied", own, skip);
	script(d, s.call);
	CHECK(ask(d, s.p1, 8, &rs) == 0, "S waits on a tool back before B's");
	ts = now_ms();
	/* free: B's own blocks and half the lost shared ones */
	pthread_mutex_lock(&d->lock);
	left = kvd_blocks_free(d);
	hold = left > own + skip / 2 ? left - own - skip / 2 : 0;
	rc = hold_blocks(d, hold, &blk, &opened);
	left = kvd_blocks_free(d);
	pthread_mutex_unlock(&d->lock);
	CHECK(rc == 0 && hold && left >= own && left < own + skip && ts - tp < p_ms - s_ms - slow(1000),
	      "%u blocks free: B's own %u, not its %u lost shared ones too; S back %.0f ms "
	      "before B", left, own, skip, p_ms - s_ms - (ts - tp));
	if (rc)
		goto stop;
	/* B's prefetch comes due while S waits */
	while (now_ms() - ts < s_ms && !strcmp(tier_of(d, rs.session), "arena"))
		msleep(20);
	CHECK(!strcmp(tier_of(d, rs.session), "arena") &&
	      metric(d, "kvarenad_evictions_total") == 1,
	      "S still in the arena when its tool returns (tier %s; %llu evictions: B's alone)",
	      tier_of(d, rs.session), (unsigned long long)metric(d, "kvarenad_evictions_total"));
	CHECK(ask(d, s.p2, 24, &r2) == 0 && r2.n_tokens > 0 &&
	      metric(d, "kvarenad_kv_misses_total") == 0, "S continues without a miss (%llu)",
	      (unsigned long long)metric(d, "kvarenad_kv_misses_total"));
stop:
	release_blocks(d, &blk, &opened);
	CHECK(ask(d, b.p2, 24, &r2) == 0 && r2.n_tokens > 0, "B continues too");
	stop(d);
out:
	rm_rf(dir);
	free(dir);
}

int main(int argc, char **argv)
{
	ssize_t n;

	if (argc >= 3 && !strcmp(argv[1], "--worker")) {
		struct kvd_worker_args a = { .backend = "cpu", .n_threads = 1, .max_batch = 16 };
		int i;

		for (i = 3; i + 1 < argc; i += 2) {
			if (!strcmp(argv[i], "--model"))
				a.model_path = argv[i + 1];
			else if (!strcmp(argv[i], "--backend"))
				a.backend = argv[i + 1];
			else if (!strcmp(argv[i], "--max-ctx"))
				a.max_ctx = (unsigned)atoi(argv[i + 1]);
			else if (!strcmp(argv[i], "--tool-open"))
				a.tool_open = argv[i + 1];
			else if (!strcmp(argv[i], "--tool-close"))
				a.tool_close = argv[i + 1];
		}
		return kvd_worker_main(KVD_WORKER_FD, &a);
	}
	if (argc < 3) {
		fprintf(stderr, "usage: %s MODEL WORKDIR\n", argv[0]);
		return 2;
	}
	model_path = argv[1];
	mkdir(argv[2], 0700);
	workdir = realpath(argv[2], NULL);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0 || !workdir)
		return 2;
	self[n] = 0;
	/* the scheduler's books checked every turn (audit.c); KVD_AUDIT= turns it off */
	setenv("KVD_AUDIT", "1", 0);
	signal(SIGPIPE, SIG_IGN);
	kvd_log_set_level(getenv("KVD_TEST_VERBOSE") ? KVD_LOG_DEBUG : KVD_LOG_WARN);
	RUN(spill_restore);
	RUN(prefetch);
	RUN(new_class);
	RUN(lazy_spill);
	RUN(corrupt);
	RUN(cap);
	RUN(overrun);
	RUN(killed);
	RUN(decisions_off);
	RUN(make_room);
	RUN(shared_prefix);
	RUN(wait_at_arrival);
	RUN(prefetch_once);
	RUN(prefetch_held);
	RUN(prefetch_taken);
	RUN(overrun_hold);
	RUN(overrun_prefetch);
	RUN(prefetch_first);
	RUN(prefetch_slack);
	RUN(room_census);
	RUN(prefetch_reserve);
	RUN(prefetch_order);
	RUN(restore_first);
	RUN(closed_mid_spill);
	RUN(closed_mid_restore);
	RUN(expire_tier);
	RUN(expire_miss);
	RUN(discard_shares);
	RUN(discard_waits);
	RUN(timer_sleeps);
	RUN(restore_shared);
	RUN(lost_shared);
#ifndef __SANITIZE_ADDRESS__
	RUN(idle1000);		/* unsanitized: check-tiering runs test_tiering_guest for it */
#endif
	printf("%d passed, %d failed\n", pass, failed);
	free((void *)workdir);
	return failed ? 1 : 0;
}
