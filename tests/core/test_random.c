// SPDX-License-Identifier: GPL-2.0
/*
 * Randomized model-based test of the whole core: a seeded PRNG drives
 * create/end/set_state/alloc/free/share/info with valid and invalid
 * arguments on small arenas, while a plain reference model (arrays, linear
 * searches, no shared code) predicts every return code and the resulting
 * state.  kvc_arena_check() runs after every operation.
 *
 * Session ids are opaque to the model: it only requires them nonzero,
 * positive and distinct among live sessions.  Block ids handed out by alloc
 * must be free in the model.  Times advance in whole microseconds, so idle
 * block-time is exact (sub-microsecond carry is tested in test_session.c).
 *
 * KVC_TEST_SEED=<n> picks the base seed (=random: a fresh one), KVC_TEST_OPS
 * the total number of operations (default 200000), KVC_TEST_STATS=1 prints
 * how often each outcome occurred.  A failure prints the seed to replay.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kvc_test.h"

#define MAX_BLOCKS	320
#define MAX_SESS	40
#define DEAD_RING	64
#define DEFAULT_OPS	200000ul
#define DEFAULT_SEED	0x6b7661726e61ull	/* "kvarna" */

struct msess {
	bool live;
	u64 id;
	u64 cookie;
	u32 state;
	u32 tool_class;
	u64 expected_wait_us;
	u64 created_ns;
	u64 state_since_ns;
	u64 transitions;
	u64 state_ns[KVC_STATE_COUNT];
	u64 idle_block_us;
	u64 idle_since_ns;		/* idle time integrated up to here */
	u32 nheld;
	u32 held[MAX_BLOCKS];
};

struct model {
	u32 nblocks;
	u32 block_size;
	u32 max_sessions;
	u32 refcnt[MAX_BLOCKS];
	u32 nfree;
	u32 nlive;
	struct msess sess[MAX_SESS];
	u64 sessions_ended;
	u64 ended_idle_block_us;
	u64 dead[DEAD_RING];
	u32 ndead;
	u64 last_id;			/* the newest id handed out */
};

enum { OP_CREATE, OP_END, OP_STATE, OP_ALLOC, OP_FREE, OP_SHARE, OP_INFO,
       OP_COUNT };
static const char *const op_names[OP_COUNT] = {
	"create", "end", "set_state", "alloc", "free", "share", "info",
};
/* Outcomes counted per operation, to prove the run covered them. */
static const int outcomes[] = {
	0, -ENOENT, -EINVAL, -ENOSPC, -EDQUOT, -EEXIST, -EALREADY,
};
#define NOUTCOMES	(sizeof(outcomes) / sizeof(outcomes[0]))

struct run {
	const char *name;
	u64 base_seed;		/* KVC_TEST_SEED: this suite's seed - index */
	unsigned long stats[OP_COUNT][NOUTCOMES + 1];	/* + other */
	unsigned long clamped;		/* partial allocs that got fewer */
	unsigned long ended_by_state;
	u32 max_live;
	u64 seed;
	u64 rng;
	unsigned long op;
	const char *what;
	bool failed;
	u64 now;
	struct kvc_arena a;
	struct model m;
	u32 ids[KVA_MAX_BATCH + 8];
	u32 out[KVA_MAX_BATCH + 8];
};

/* ---- PRNG: splitmix64 ---- */

static u64 rnd(struct run *r)
{
	u64 z = (r->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static u32 below(struct run *r, u32 n)
{
	return n ? (u32)(rnd(r) % n) : 0;
}

static bool chance(struct run *r, u32 percent)
{
	return below(r, 100) < percent;
}

static void fail(struct run *r, const char *fmt, ...)
{
	va_list ap;

	if (r->failed)
		return;
	r->failed = true;
	fprintf(stderr, "\n  random[%s]: seed %llu (replay: KVC_TEST_SEED=%llu), "
		"op %lu (%s): ", r->name, (unsigned long long)r->seed,
		(unsigned long long)r->base_seed, r->op, r->what);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void count(struct run *r, int op, int ret)
{
	size_t i;

	for (i = 0; i < NOUTCOMES && outcomes[i] != ret; i++)
		;
	r->stats[op][i]++;
}

/* Small negative values print as errnos, the rest as unsigned. */
static void expect_fail(struct run *r, const char *what, unsigned long long g,
			unsigned long long w, int line)
{
	if ((long long)g < 0 && (long long)g > -4096 &&
	    (long long)w <= 0 && (long long)w > -4096)
		fail(r, "%s = %lld, model says %lld (line %d)", what,
		     (long long)g, (long long)w, line);
	else
		fail(r, "%s = %llu, model says %llu (line %d)", what, g, w,
		     line);
}

#define EXPECT_EQ(r, got, want)						\
	do {								\
		unsigned long long g_ = (got), w_ = (want);		\
		if (g_ != w_)						\
			expect_fail(r, #got, g_, w_, __LINE__);		\
	} while (0)

/* ---- the model ---- */

static bool m_idle(u32 state)
{
	return state == KVA_STATE_IDLE || state == KVA_STATE_TOOL_WAIT;
}

static struct msess *m_find(struct model *m, u64 id)
{
	u32 i;

	if (!id)
		return NULL;
	for (i = 0; i < MAX_SESS; i++)
		if (m->sess[i].live && m->sess[i].id == id)
			return &m->sess[i];
	return NULL;
}

static bool m_holds(const struct msess *ms, u32 b)
{
	u32 i;

	for (i = 0; i < ms->nheld; i++)
		if (ms->held[i] == b)
			return true;
	return false;
}

/* Idle block-us up to now, without changing the model. */
static u64 m_idle_at(const struct msess *ms, u64 now)
{
	u64 v = ms->idle_block_us;

	if (m_idle(ms->state) && now > ms->idle_since_ns)
		v += ms->nheld * ((now - ms->idle_since_ns) / 1000);
	return v;
}

static void m_settle(struct msess *ms, u64 now)
{
	ms->idle_block_us = m_idle_at(ms, now);
	ms->idle_since_ns = now;
}

static u32 m_end(struct model *m, struct msess *ms, u64 now)
{
	u32 i, released = 0;

	m_settle(ms, now);
	for (i = 0; i < ms->nheld; i++)
		if (--m->refcnt[ms->held[i]] == 0)
			released++;
	m->nfree += released;
	m->sessions_ended++;
	m->ended_idle_block_us += ms->idle_block_us;
	m->dead[m->ndead++ % DEAD_RING] = ms->id;
	ms->live = false;
	m->nlive--;
	return released;
}

/* ---- comparing the arena with the model ---- */

static void compare_info(struct run *r, struct msess *ms)
{
	struct kva_session_info info;
	u64 idle = m_idle_at(ms, r->now);
	u32 i;
	int ret;

	memset(&info, 0xa5, sizeof(info));
	ret = kvc_session_info(&r->a, ms->id, r->now, &info);
	EXPECT_EQ(r, ret, 0);
	if (ret)
		return;
	EXPECT_EQ(r, info.session_id, ms->id);
	EXPECT_EQ(r, info.state, ms->state);
	EXPECT_EQ(r, info.tool_class, ms->tool_class);
	EXPECT_EQ(r, info.blocks_held, ms->nheld);
	EXPECT_EQ(r, info.expected_wait_us, ms->expected_wait_us);
	EXPECT_EQ(r, info.cookie, ms->cookie);
	EXPECT_EQ(r, info.created_ns, ms->created_ns);
	EXPECT_EQ(r, info.state_since_ns, ms->state_since_ns);
	EXPECT_EQ(r, info.transitions, ms->transitions);
	EXPECT_EQ(r, info.idle_block_us, idle);
	EXPECT_EQ(r, info.idle_byte_sec,
		  (u64)((unsigned __int128)idle * r->m.block_size / 1000000));
	for (i = 0; i < KVC_STATE_COUNT; i++)
		EXPECT_EQ(r, info.state_ns[i], ms->state_ns[i] +
			  (i == ms->state ? r->now - ms->state_since_ns : 0));
}

static void compare_all(struct run *r, bool with_info)
{
	struct model *m = &r->m;
	struct kvc_arena *a = &r->a;
	u32 i, j, cursor = 0, seen = 0;
	int ret;

	ret = kvc_arena_check(a);
	if (ret)
		fail(r, "kvc_arena_check() = %d", ret);
	EXPECT_EQ(r, a->nsessions, m->nlive);
	EXPECT_EQ(r, a->pool.nfree, m->nfree);
	EXPECT_EQ(r, kvc_blocks_in_use(a), m->nblocks - m->nfree);
	EXPECT_EQ(r, a->sessions_ended, m->sessions_ended);
	EXPECT_EQ(r, a->ended_idle_block_us, m->ended_idle_block_us);
	for (i = 0; i < m->nblocks && !r->failed; i++)
		if (a->pool.refcnt[i] != m->refcnt[i])
			fail(r, "refcnt[%u] = %u, model says %u", i,
			     a->pool.refcnt[i], m->refcnt[i]);
	for (i = 0; i < MAX_SESS && !r->failed; i++) {
		struct msess *ms = &m->sess[i];
		struct kvc_session *s;

		if (!ms->live)
			continue;
		s = kvc_session_find(a, ms->id);
		if (!s) {
			fail(r, "session %#llx lost",
			     (unsigned long long)ms->id);
			break;
		}
		EXPECT_EQ(r, s->state, ms->state);
		EXPECT_EQ(r, s->nheld, ms->nheld);
		for (j = 0; j < ms->nheld && !r->failed; j++)
			if (s->held[j] != ms->held[j])
				fail(r, "session %#llx held[%u] = %u, model "
				     "says %u", (unsigned long long)ms->id, j,
				     s->held[j],
				     ms->held[j]);
		if (with_info)
			compare_info(r, ms);
	}
	while (kvc_session_next(a, &cursor))
		seen++;
	EXPECT_EQ(r, seen, m->nlive);
}

/* ---- choosing arguments ---- */

static struct msess *pick_live(struct run *r)
{
	u32 i, k;

	if (!r->m.nlive)
		return NULL;
	k = below(r, r->m.nlive);
	for (i = 0; i < MAX_SESS; i++)
		if (r->m.sess[i].live && !k--)
			return &r->m.sess[i];
	return NULL;
}

/* Mostly a live id; sometimes a stale, random, zero or mangled one. */
static u64 pick_id(struct run *r)
{
	struct msess *ms = pick_live(r);
	u32 p = below(r, 100);

	if (p < 75 && ms)
		return ms->id;
	if (p < 88 && r->m.ndead)
		return r->m.dead[below(r, r->m.ndead < DEAD_RING ?
				       r->m.ndead : DEAD_RING)];
	if (p < 92)
		return 0;
	if (p < 96 && ms)
		return ms->id ^ (1ull << (KVC_SLOT_BITS + below(r, 48)));
	if (p < 98)
		return below(r, 2) ? (u32)rnd(r) : rnd(r);
	return below(r, 8);
}

/* A batch size for the ids[] buffer; sometimes 0 or too big. */
static u32 bad_count(struct run *r)
{
	switch (below(r, 3)) {
	case 0:
		return 0;
	case 1:
		return KVA_MAX_BATCH + 1;
	default:
		return chance(r, 50) ? UINT32_MAX : KVA_MAX_BATCH + 1 +
			below(r, 7);
	}
}

/* An id that is not a valid block. */
static u32 bad_block(struct run *r)
{
	switch (below(r, 4)) {
	case 0:
		return r->m.nblocks;
	case 1:
		return r->m.nblocks + below(r, 1000);
	case 2:
		return KVC_MAX_BLOCKS | below(r, r->m.nblocks);
	default:
		return UINT32_MAX - below(r, 4);
	}
}

/* Any block with the given allocation status (refcnt 0 or not). */
static bool block_with(struct run *r, bool allocated, u32 *b)
{
	u32 start = below(r, r->m.nblocks), i;

	for (i = 0; i < r->m.nblocks; i++) {
		u32 c = (start + i) % r->m.nblocks;

		if ((r->m.refcnt[c] != 0) == allocated) {
			*b = c;
			return true;
		}
	}
	return false;
}

static void shuffle(struct run *r, u32 *v, u32 n)
{
	u32 i;

	for (i = n; i > 1; i--) {
		u32 j = below(r, i), t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

/* Spoil one entry of a batch of n >= 1, or append to it (n < cap). */
static u32 spoil(struct run *r, u32 *ids, u32 n, struct msess *ms)
{
	u32 pos = below(r, n + 1), b;

	if (pos == n)
		n++;
	switch (below(r, 4)) {
	case 0:
		ids[pos] = bad_block(r);
		break;
	case 1:		/* a repeat of another entry */
		if (n >= 2) {
			u32 j = below(r, n - 1);

			ids[pos] = ids[j >= pos ? j + 1 : j];
		} else {
			ids[pos] = bad_block(r);
		}
		break;
	case 2:		/* a free block */
		ids[pos] = block_with(r, false, &b) ? b : bad_block(r);
		break;
	default:	/* held by the session, or not: either way */
		if (ms && ms->nheld && chance(r, 50))
			ids[pos] = ms->held[below(r, ms->nheld)];
		else
			ids[pos] = block_with(r, true, &b) ? b : bad_block(r);
		break;
	}
	return n;
}

/* ---- operations ---- */

static void op_create(struct run *r)
{
	struct model *m = &r->m;
	u64 cookie = rnd(r);
	u64 id = 0xdeadbeef;
	u32 i;
	int ret;

	r->what = "create";
	ret = kvc_session_create(&r->a, cookie, r->now, &id);
	count(r, OP_CREATE, ret);
	if (m->nlive >= m->max_sessions) {
		EXPECT_EQ(r, ret, -ENOSPC);
		EXPECT_EQ(r, id, 0xdeadbeef);
		return;
	}
	EXPECT_EQ(r, ret, 0);
	if (ret)
		return;
	/* Never an id seen before: each one above the last. */
	if (!id || id >= (1ull << 63) || id <= m->last_id || m_find(m, id) ||
	    (id & KVC_SLOT_MASK) > m->max_sessions) {
		fail(r, "bad new session id %#llx", (unsigned long long)id);
		return;
	}
	m->last_id = id;
	for (i = 0; i < MAX_SESS && m->sess[i].live; i++)
		;
	if (i == MAX_SESS) {
		fail(r, "model out of session space");
		return;
	}
	memset(&m->sess[i], 0, sizeof(m->sess[i]));
	m->sess[i].live = true;
	m->sess[i].id = id;
	m->sess[i].cookie = cookie;
	m->sess[i].state = KVA_STATE_IDLE;
	m->sess[i].created_ns = r->now;
	m->sess[i].state_since_ns = r->now;
	m->sess[i].idle_since_ns = r->now;
	m->nlive++;
	if (m->nlive > r->max_live)
		r->max_live = m->nlive;
}

static void op_end(struct run *r)
{
	u64 id = pick_id(r);
	u32 released = 0xdeadbeef;
	struct msess *ms = m_find(&r->m, id);
	int ret;

	r->what = "end";
	ret = kvc_session_end(&r->a, id, r->now, &released);
	count(r, OP_END, ret);
	if (!ms) {
		EXPECT_EQ(r, ret, -ENOENT);
		return;
	}
	EXPECT_EQ(r, ret, 0);
	EXPECT_EQ(r, released, m_end(&r->m, ms, r->now));
}

static void op_set_state(struct run *r)
{
	u64 id = pick_id(r);
	u32 released = 0xdeadbeef, state, tool = 0;
	struct msess *ms = m_find(&r->m, id);
	u64 wait = 0;
	int ret, want;

	r->what = "set_state";
	state = chance(r, 5) ? KVC_STATE_COUNT + below(r, 3) :
		below(r, 100) < 6 ? KVA_STATE_ENDED : below(r, 4);
	if (chance(r, 3))
		state = UINT32_MAX;
	if (state == KVA_STATE_TOOL_WAIT ? chance(r, 70) : chance(r, 8)) {
		tool = chance(r, 70) ? below(r, 16) : (u32)rnd(r);
		wait = chance(r, 70) ? below(r, 5000000) : rnd(r);
	}
	ret = kvc_session_set_state(&r->a, id, state, tool, wait, r->now,
				    &released);
	count(r, OP_STATE, ret);
	if (!ms)
		want = -ENOENT;
	else if (state >= KVC_STATE_COUNT)
		want = -EINVAL;
	else if (state != KVA_STATE_TOOL_WAIT && (tool || wait))
		want = -EINVAL;
	else if (state == KVA_STATE_ENDED)
		want = 0;
	else if (state == ms->state)
		want = -EALREADY;
	else
		want = 0;
	EXPECT_EQ(r, ret, want);
	if (want) {
		EXPECT_EQ(r, released, 0);
		return;
	}
	if (state == KVA_STATE_ENDED) {
		r->ended_by_state++;
		EXPECT_EQ(r, released, m_end(&r->m, ms, r->now));
		return;
	}
	EXPECT_EQ(r, released, 0);
	m_settle(ms, r->now);
	ms->state_ns[ms->state] += r->now - ms->state_since_ns;
	ms->state = state;
	ms->state_since_ns = r->now;
	ms->tool_class = tool;
	ms->expected_wait_us = wait;
	ms->transitions++;
}

static void op_alloc(struct run *r)
{
	struct model *m = &r->m;
	u64 id = pick_id(r);
	u32 n, quota, done = 0xdeadbeef, i, j;
	struct msess *ms = m_find(m, id);
	bool partial = chance(r, 40);
	int ret, want = 0;

	r->what = "alloc";
	if (chance(r, 4))
		n = bad_count(r);
	else if (chance(r, 15))
		n = 1 + below(r, m->nfree + 4);
	else
		n = 1 + below(r, 6);
	quota = chance(r, 65) ? UINT32_MAX : below(r, 10);
	for (i = 0; i < KVA_MAX_BATCH + 8; i++)
		r->out[i] = 0xdeadbeef;
	ret = kvc_blocks_alloc(&r->a, id, n, partial, quota, r->now, r->out,
			       &done);
	count(r, OP_ALLOC, ret);
	if (!ret && done < n)
		r->clamped++;
	if (!ms) {
		want = -ENOENT;
	} else if (!n || n > KVA_MAX_BATCH) {
		want = -EINVAL;
	} else {
		if (n > m->nfree) {
			if (!partial || !m->nfree)
				want = -ENOSPC;
			n = m->nfree;
		}
		if (!want && n > quota) {
			if (!partial || !quota)
				want = -EDQUOT;
			n = quota;
		}
	}
	EXPECT_EQ(r, ret, want);
	if (want) {
		EXPECT_EQ(r, done, 0);
		EXPECT_EQ(r, r->out[0], 0xdeadbeef);
		return;
	}
	EXPECT_EQ(r, done, n);
	if (r->failed)
		return;
	for (i = 0; i < n; i++) {
		u32 b = r->out[i];

		if (b >= m->nblocks || m->refcnt[b]) {
			fail(r, "alloc handed out block %u (refcnt %u)", b,
			     b < m->nblocks ? m->refcnt[b] : 0);
			return;
		}
		for (j = 0; j < i; j++)
			if (r->out[j] == b)
				fail(r, "alloc handed out %u twice", b);
	}
	EXPECT_EQ(r, r->out[n], 0xdeadbeef);
	m_settle(ms, r->now);
	for (i = 0; i < n; i++) {
		m->refcnt[r->out[i]] = 1;
		ms->held[ms->nheld++] = r->out[i];
	}
	m->nfree -= n;
}

static void op_free(struct run *r)
{
	struct model *m = &r->m;
	u64 id = pick_id(r);
	u32 n = 0, released = 0xdeadbeef, zeroed = 0, i, j;
	struct msess *ms = m_find(m, id);
	int ret, want = 0;

	r->what = "free";
	if (ms && ms->nheld) {
		memcpy(r->ids, ms->held, ms->nheld * sizeof(u32));
		shuffle(r, r->ids, ms->nheld);
		n = chance(r, 10) ? ms->nheld : 1 + below(r, ms->nheld < 6 ?
							  ms->nheld : 6);
	}
	if (!n || chance(r, 25))
		n = spoil(r, r->ids, n, ms);
	if (chance(r, 3))
		n = bad_count(r);
	ret = kvc_blocks_free(&r->a, id, n, r->ids, r->now, &released);
	count(r, OP_FREE, ret);
	if (!ms) {
		want = -ENOENT;
	} else if (!n || n > KVA_MAX_BATCH) {
		want = -EINVAL;
	} else {
		/* The first offending id decides. */
		for (i = 0; i < n && !want; i++) {
			if (r->ids[i] >= m->nblocks)
				want = -EINVAL;
			else if (!m_holds(ms, r->ids[i]))
				want = -ENOENT;
			for (j = 0; j < i && !want; j++)
				if (r->ids[j] == r->ids[i])
					want = -EINVAL;
		}
	}
	EXPECT_EQ(r, ret, want);
	if (want) {
		EXPECT_EQ(r, released, 0);
		return;
	}
	m_settle(ms, r->now);
	for (i = 0; i < n; i++) {
		u32 b = r->ids[i], k = 0;

		for (j = 0; j < ms->nheld; j++)
			if (ms->held[j] != b)
				ms->held[k++] = ms->held[j];
		ms->nheld = k;
		if (--m->refcnt[b] == 0)
			zeroed++;
	}
	m->nfree += zeroed;
	EXPECT_EQ(r, released, zeroed);
}

static void op_share(struct run *r)
{
	struct model *m = &r->m;
	u64 id = pick_id(r);
	u32 n = 0, i, j, b;
	struct msess *ms = m_find(m, id);
	int ret, want = 0;

	r->what = "share";
	/* Allocated blocks the session does not hold. */
	for (b = 0; b < m->nblocks; b++)
		if (m->refcnt[b] && !(ms && m_holds(ms, b)))
			r->ids[n++] = b;
	shuffle(r, r->ids, n);
	if (n)
		n = 1 + below(r, n < 5 ? n : 5);
	if (!n || chance(r, 25))
		n = spoil(r, r->ids, n, ms);
	if (chance(r, 3))
		n = bad_count(r);
	ret = kvc_blocks_share(&r->a, id, n, r->ids, r->now);
	count(r, OP_SHARE, ret);
	if (!ms) {
		want = -ENOENT;
	} else if (!n || n > KVA_MAX_BATCH) {
		want = -EINVAL;
	} else {
		for (i = 0; i < n && !want; i++) {
			b = r->ids[i];
			if (b >= m->nblocks) {
				want = -EINVAL;
				break;
			}
			if (!m->refcnt[b]) {
				want = -ENOENT;
				break;
			}
			for (j = 0; j < i && !want; j++)
				if (r->ids[j] == b)
					want = -EINVAL;
			if (!want && m_holds(ms, b))
				want = -EEXIST;
		}
	}
	EXPECT_EQ(r, ret, want);
	if (want)
		return;
	m_settle(ms, r->now);
	for (i = 0; i < n; i++) {
		m->refcnt[r->ids[i]]++;
		ms->held[ms->nheld++] = r->ids[i];
	}
}

static void op_info(struct run *r)
{
	u64 id = pick_id(r);
	struct msess *ms = m_find(&r->m, id);
	struct kva_session_info info;

	r->what = "info";
	if (ms) {
		count(r, OP_INFO, 0);
		compare_info(r, ms);
	} else {
		int ret = kvc_session_info(&r->a, id, r->now, &info);

		count(r, OP_INFO, ret);
		EXPECT_EQ(r, ret, -ENOENT);
	}
}

static void advance_time(struct run *r)
{
	u32 p = below(r, 100);

	if (p < 15)
		return;				/* same instant */
	if (p < 90)
		r->now += 1000ull * (1 + below(r, 50));
	else if (p < 99)
		r->now += 1000ull * below(r, 2000000);
	else
		r->now += 1000ull * 3600 * 1000000;	/* an hour */
}

/* ---- driver ---- */

struct config {
	const char *name;
	u32 nblocks;
	u32 max_sessions;
	u32 block_size;
	u32 share;		/* of DEFAULT_OPS */
};

static const struct config configs[] = {
	{ "tiny", 1, 1, 4096, 5 },
	{ "small", 8, 3, 2097152, 25 },
	{ "medium", 48, 20, 65536, 40 },
	{ "large", 300, 40, 4096, 30 },
};

/* Outcomes every run of a non-trivial arena must have produced. */
static const struct { int op; int ret; } required[] = {
	{ OP_CREATE, 0 }, { OP_CREATE, -ENOSPC },
	{ OP_END, 0 }, { OP_END, -ENOENT },
	{ OP_STATE, 0 }, { OP_STATE, -ENOENT }, { OP_STATE, -EINVAL },
	{ OP_STATE, -EALREADY },
	{ OP_ALLOC, 0 }, { OP_ALLOC, -ENOENT }, { OP_ALLOC, -EINVAL },
	{ OP_ALLOC, -ENOSPC }, { OP_ALLOC, -EDQUOT },
	{ OP_FREE, 0 }, { OP_FREE, -ENOENT }, { OP_FREE, -EINVAL },
	{ OP_SHARE, 0 }, { OP_SHARE, -ENOENT }, { OP_SHARE, -EINVAL },
	{ OP_SHARE, -EEXIST },
	{ OP_INFO, 0 }, { OP_INFO, -ENOENT },
};

static unsigned long stat_of(const struct run *r, int op, int ret)
{
	size_t i;

	for (i = 0; i < NOUTCOMES && outcomes[i] != ret; i++)
		;
	return r->stats[op][i];
}

static void report(const struct run *r, bool verbose, bool require)
{
	static const char *const names[NOUTCOMES + 1] = {
		"ok", "ENOENT", "EINVAL", "ENOSPC", "EDQUOT", "EEXIST",
		"EALREADY", "other",
	};
	size_t op, i;

	if (verbose) {
		fprintf(stderr, "\n  random[%s] seed %llu: %lu ops, "
			"max %u live, %lu clamped allocs, %lu ENDED by "
			"set_state\n", r->name,
			(unsigned long long)r->seed, r->op, r->max_live,
			r->clamped, r->ended_by_state);
		for (op = 0; op < OP_COUNT; op++) {
			fprintf(stderr, "    %-10s", op_names[op]);
			for (i = 0; i <= NOUTCOMES; i++)
				if (r->stats[op][i])
					fprintf(stderr, " %s:%lu", names[i],
						r->stats[op][i]);
			fputc('\n', stderr);
		}
	}
	if (!require)
		return;
	for (i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
		if (stat_of(r, required[i].op, required[i].ret))
			continue;
		fprintf(stderr, "\n  random[%s] seed %llu: %s never "
			"returned %d\n", r->name,
			(unsigned long long)r->seed,
			op_names[required[i].op], required[i].ret);
		CU_FAIL("an expected outcome never occurred");
	}
	CU_ASSERT(r->clamped > 0);
	CU_ASSERT(r->ended_by_state > 0);
	CU_ASSERT_EQUAL(r->max_live, r->m.max_sessions);
	for (op = 0; op < OP_COUNT; op++)
		CU_ASSERT_EQUAL(r->stats[op][NOUTCOMES], 0);	/* "other" */
}

static u64 env_u64(const char *name, u64 def)
{
	const char *v = getenv(name);

	return v && *v ? strtoull(v, NULL, 0) : def;
}

/* KVC_TEST_SEED=<n>, or =random for a fresh one (printed on failure). */
static u64 base_seed(void)
{
	static u64 seed;
	static bool chosen;
	const char *v = getenv("KVC_TEST_SEED");

	if (chosen)
		return seed;
	chosen = true;
	if (v && !strcmp(v, "random")) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (u64)ts.tv_sec * 1000000007ull ^ (u64)ts.tv_nsec ^
		       ((u64)getpid() << 32);
		fprintf(stderr, "\n  random: KVC_TEST_SEED=%llu\n",
			(unsigned long long)seed);
	} else {
		seed = env_u64("KVC_TEST_SEED", DEFAULT_SEED);
	}
	return seed;
}

static void run_config(const struct config *c, u64 base_seed, u32 index,
		       unsigned long ops)
{
	static struct run r;
	void (*const opfn[])(struct run *) = {
		op_create, op_end, op_set_state, op_alloc, op_free, op_share,
		op_info,
	};
	static const u32 weight[OP_COUNT] = { 10, 5, 20, 22, 20, 15, 8 };
	u32 i, p;

	memset(&r, 0, sizeof(r));
	r.name = c->name;
	r.base_seed = base_seed;
	r.seed = base_seed + index;
	r.rng = r.seed;
	r.what = "init";
	r.now = 1000ull * below(&r, 1000000);
	r.m.nblocks = c->nblocks;
	r.m.block_size = c->block_size;
	r.m.max_sessions = c->max_sessions;
	r.m.nfree = c->nblocks;
	CU_ASSERT_EQUAL_FATAL(kvc_arena_init(&r.a, c->nblocks, c->block_size,
					     c->max_sessions), 0);
	for (r.op = 0; r.op < ops && !r.failed; r.op++) {
		advance_time(&r);
		p = below(&r, 100);
		for (i = 0; p >= weight[i]; i++)
			p -= weight[i];
		opfn[i](&r);
		compare_all(&r, r.op % 97 == 0);
	}
	if (!r.failed) {
		r.what = "final";
		compare_all(&r, true);
	}
	CU_ASSERT_FALSE(r.failed);
	report(&r, getenv("KVC_TEST_STATS") != NULL,
	       !r.failed && c->nblocks > 1 && ops >= 10000);
	kvc_arena_destroy(&r.a);
}

static void run_named(const char *name)
{
	unsigned long total = env_u64("KVC_TEST_OPS", DEFAULT_OPS);
	u32 i;

	for (i = 0; i < sizeof(configs) / sizeof(configs[0]); i++)
		if (!strcmp(configs[i].name, name))
			run_config(&configs[i], base_seed(), i,
				   total / 100 * configs[i].share);
}

static void test_tiny(void)
{
	run_named("tiny");
}

static void test_small(void)
{
	run_named("small");
}

static void test_medium(void)
{
	run_named("medium");
}

static void test_large(void)
{
	run_named("large");
}

static const CU_TestInfo random_tests[] = {
	{ "model: 1 block, 1 session", test_tiny },
	{ "model: 8 blocks, 3 sessions", test_small },
	{ "model: 48 blocks, 20 sessions", test_medium },
	{ "model: 300 blocks, 40 sessions", test_large },
	CU_TEST_INFO_NULL,
};

int kvc_test_register_random(void)
{
	return kvc_test_add_suite("random", random_tests);
}
