// SPDX-License-Identifier: MIT
/*
 * conv.c - conversations: one kvarena session per conversation, its token
 * history, the text those tokens stand for, and how a request finds the
 * conversation it continues.
 *
 * A follow-up request (the next turn, or the request carrying tool
 * results) repeats the conversation's whole text: the chat template is
 * byte-stable, so the rendered prompt of turn N+1 starts with the text of
 * turn N's prompt and reply. Every idle conversation is indexed by a hash
 * of its whole text (per tenant, seeded per daemon); a request hashes its
 * prompt's prefixes once, outside the orchestrator's lock, keeping the
 * lengths whose hash a counting filter has seen, and under the lock the
 * longest of those whose text really is the prompt's prefix wins: O(prompt
 * length), never a scan of every conversation. Only the appended text is
 * tokenized and prefilled; matching text rather than re-tokenized ids
 * keeps the model's own sampled tokens, which a re-tokenization of the
 * reply would not reproduce. A conversation the prompt does not repeat
 * whole is never continued, cut or claimed: the request starts its own
 * and shares the common prefix's blocks through the radix index
 * (prefix.c). The text is matched with its kinds too (markup.c): a kept
 * conversation is continued only when the prompt's markup and plain text
 * agree with all of its text, so client text spelling its turns never
 * gets their marker tokens. prompt_cache_key / user play no part here (a
 * routing hint, router.c).
 *
 * Also here: the block accounting (who holds each block), KV retention
 * deadlines (a heap), the max_sessions bound (least recently used idle
 * conversation first), lookups by id and by kvarena session.
 * Not here: the radix index (radix.c, prefix.c), kernel states (kstate.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "internal.h"
#include "log.h"

#define FNV_PRIME 0x100000001b3ull

/* ---- indexes ---------------------------------------------------------- */

int kvd_conv_init(struct kvd *d)
{
	uint32_t n = d->cfg.max_sessions, bits = KVD_TEXT_FILTER_MIN_BITS;

	if (getrandom(&d->text_seed, sizeof(d->text_seed), 0) != sizeof(d->text_seed))
		d->text_seed = kvd_now_ns() * 0x9e3779b97f4a7c15ull;
	while (bits < KVD_TEXT_FILTER_MAX_BITS &&
	       (1ull << bits) < (uint64_t)n * KVD_TEXT_FILTER_PER_CONV)
		bits++;
	d->text_filter_mask = (1u << bits) - 1;
	d->text_filter = calloc((size_t)d->text_filter_mask + 1, sizeof(*d->text_filter));
	d->deadlines = calloc(n + 1, sizeof(*d->deadlines));
	if (!d->text_filter || !d->deadlines || kvd_hmap_init(&d->conv_by_id, n) ||
	    kvd_hmap_init(&d->conv_by_sid, n) || kvd_hmap_init(&d->conv_by_text, n))
		return -ENOMEM;
	return 0;
}

void kvd_conv_fini(struct kvd *d)
{
	kvd_hmap_fini(&d->conv_by_id);
	kvd_hmap_fini(&d->conv_by_sid);
	kvd_hmap_fini(&d->conv_by_text);
	free(d->text_filter);
	free(d->deadlines);
	d->text_filter = NULL;
	d->deadlines = NULL;
}

static uint64_t id_key(const char *id)
{
	uint64_t h = 0xcbf29ce484222325ull;

	while (*id)
		h = (h ^ (uint8_t)*id++) * FNV_PRIME;
	return kvd_mix64(h);
}

/* The text index's key of a text whose running hash is h. */
static uint64_t text_key(const struct kvd *d, uint32_t tenant, uint64_t h)
{
	return kvd_mix64(h ^ d->text_seed ^ ((uint64_t)tenant * 0x9e3779b97f4a7c15ull));
}

static uint64_t text_hash_more(uint64_t h, const char *p, size_t n)
{
	while (n--)
		h = (h ^ (uint8_t)*p++) * FNV_PRIME;
	return h;
}

/* The i-th of a key's counters (double hashing: two halves of the key) */
static uint32_t filter_slot(const struct kvd *d, uint64_t key, uint32_t i)
{
	return ((uint32_t)(key >> 32) + i * ((uint32_t)key | 1)) & d->text_filter_mask;
}

static void filter_count(struct kvd *d, uint64_t key, int by)
{
	uint32_t i;

	for (i = 0; i < KVD_TEXT_PROBES; i++)
		__atomic_add_fetch(&d->text_filter[filter_slot(d, key, i)], (uint16_t)by,
				   __ATOMIC_RELAXED);
}

/* Read without the lock: a stale count only adds or misses a candidate */
static int filter_has(const struct kvd *d, uint64_t key)
{
	uint32_t i;

	for (i = 0; i < KVD_TEXT_PROBES; i++)
		if (!__atomic_load_n(&d->text_filter[filter_slot(d, key, i)], __ATOMIC_RELAXED))
			return 0;
	return 1;
}

static void text_index(struct kvd *d, struct kvd_conv *c)
{
	uint64_t k;

	if (c->text_indexed || !c->text_len || c->delete_pending || !d->cfg.retention)
		return;
	k = text_key(d, c->tenant, c->text_hash);
	kvd_hmap_add(&d->conv_by_text, &c->by_text, k);
	filter_count(d, k, 1);
	c->text_indexed = 1;
}

static void text_unindex(struct kvd *d, struct kvd_conv *c)
{
	if (!c->text_indexed)
		return;
	filter_count(d, c->by_text.key, -1);
	kvd_hmap_del(&d->conv_by_text, &c->by_text);
	c->text_indexed = 0;
}

/* ---- the LRU list and deadlines ---------------------------------------- */

static void list_del(struct kvd *d, struct kvd_conv *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		d->convs = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		d->convs_tail = c->prev;
	c->prev = c->next = NULL;
}

static void list_push(struct kvd *d, struct kvd_conv *c)
{
	c->next = d->convs;
	c->prev = NULL;
	if (d->convs)
		d->convs->prev = c;
	else
		d->convs_tail = c;
	d->convs = c;
}

void kvd_conv_touch(struct kvd *d, struct kvd_conv *c)
{
	c->last_used_ns = kvd_now_ns();
	if (d->convs != c) {
		list_del(d, c);
		list_push(d, c);
	}
}

static int dl_before(const struct kvd_conv *a, const struct kvd_conv *b)
{
	return a->deadline_ns < b->deadline_ns;
}

static void dl_swap(struct kvd *d, uint32_t i, uint32_t j)
{
	struct kvd_conv *t = d->deadlines[i];

	d->deadlines[i] = d->deadlines[j];
	d->deadlines[j] = t;
	d->deadlines[i]->dl_index = i;
	d->deadlines[j]->dl_index = j;
}

static void dl_fix(struct kvd *d, uint32_t i)
{
	while (i && dl_before(d->deadlines[i], d->deadlines[(i - 1) / 2])) {
		dl_swap(d, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	for (;;) {
		uint32_t l = 2 * i + 1, b = i;

		if (l < d->n_deadlines && dl_before(d->deadlines[l], d->deadlines[b]))
			b = l;
		if (l + 1 < d->n_deadlines && dl_before(d->deadlines[l + 1], d->deadlines[b]))
			b = l + 1;
		if (b == i)
			break;
		dl_swap(d, i, b);
		i = b;
	}
}

static void dl_remove(struct kvd *d, struct kvd_conv *c)
{
	uint32_t i = c->dl_index;

	if (i == UINT32_MAX)
		return;
	c->dl_index = UINT32_MAX;
	if (i != --d->n_deadlines) {
		d->deadlines[i] = d->deadlines[d->n_deadlines];
		d->deadlines[i]->dl_index = i;
		dl_fix(d, i);
	}
}

void kvd_conv_set_deadline(struct kvd *d, struct kvd_conv *c, uint64_t when_ns)
{
	dl_remove(d, c);
	c->deadline_ns = when_ns;
	if (!when_ns || d->n_deadlines > d->cfg.max_sessions)
		return;
	c->dl_index = d->n_deadlines;
	d->deadlines[d->n_deadlines++] = c;
	dl_fix(d, c->dl_index);
}

/* Releases the KV of idle conversations whose retention is over, soonest
 * first; returns when the next one is due (0: none). */
uint64_t kvd_conv_expire(struct kvd *d, uint64_t now)
{
	while (d->n_deadlines) {
		struct kvd_conv *c = d->deadlines[0];

		if (c->deadline_ns > now)
			return c->deadline_ns;
		dl_remove(d, c);
		if (c->job || !c->has_kv)
			continue;
		if (c->tier_op) {
			/* a spill or restore in flight: look again shortly */
			kvd_conv_set_deadline(d, c, now + 100000000ull);
			continue;
		}
		kvd_log(KVD_LOG_DEBUG, "sched", "%s: retention over, KV released", c->id);
		/* to disk when there is a tier, else released */
		kvd_tiering_expire(d, c);
	}
	return 0;
}

/* ---- life ---------------------------------------------------------------- */

uint32_t kvd_conv_blocks(const struct kvd_conv *c)
{
	return c->has_kv ? c->as.s.n_blocks : 0;
}

struct kvd_conv *kvd_conv_new(struct kvd *d, uint32_t tenant)
{
	struct kvd_conv *c;
	uint8_t rnd[12];
	int i;

	/* forget the least recently used idle conversation past the cap */
	if (d->n_convs >= d->cfg.max_sessions) {
		struct kvd_conv *old = d->convs_tail;

		while (old && old->job)
			old = old->prev;
		if (!old)
			return NULL;
		kvd_conv_free(d, old);
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		free(c);
		return NULL;
	}
	memcpy(c->id, "sess_", 5);
	for (i = 0; i < 12; i++)
		snprintf(c->id + 5 + 2 * i, 3, "%02x", rnd[i]);
	memcpy(&c->tier_key, rnd, sizeof(c->tier_key));
	c->tenant = tenant;
	c->kstate = KVA_STATE_IDLE;
	c->dl_index = UINT32_MAX;
	c->text_hash = 0xcbf29ce484222325ull;
	c->last_used_ns = kvd_now_ns();
	c->t_start_ns = c->last_used_ns;
	list_push(d, c);
	kvd_hmap_add(&d->conv_by_id, &c->by_id, id_key(c->id));
	d->n_convs++;
	return c;
}

/* Who holds each block: conversations (block_users) and tenants'
 * budgets; a block whose last holder goes becomes evictable in the radix
 * index (when cached there), and busy again when one takes it. */
void kvd_blocks_hold(struct kvd *d, struct kvd_conv *c, uint32_t from, uint32_t to, int delta)
{
	uint32_t i, slot;

	for (i = from; i < to; i++) {
		uint32_t b = c->as.s.block_table[i];

		if (delta > 0) {
			if (!d->block_users[b]++)
				kvd_prefix_busy(d, b, 1);
		} else if (d->block_users[b] && !--d->block_users[b]) {
			kvd_prefix_busy(d, b, 0);
		}
	}
	slot = kvd_tenant_slot(d, c->tenant);
	if (slot)
		d->tenant_blocks[slot] += (uint32_t)(delta * (int)(to - from));
}

int kvd_conv_open_kv(struct kvd *d, struct kvd_conv *c)
{
	int rc;

	if (c->has_kv)
		return 0;
	/* the cookie operators see (kvactl): a serial, not an address */
	rc = kve_arena_session_open(d->kv, ++d->kv_serial, d->ctx_len, &c->as);
	if (rc)
		return rc;
	c->has_kv = 1;
	kvd_prefix_offered_to(c, 0);
	c->kstate = KVA_STATE_IDLE;
	c->kclass = 0;
	c->kexpected_us = 0;
	c->ktier = KVA_TIER_ARENA;	/* a new kvarena session's */
	kvd_hmap_add(&d->conv_by_sid, &c->by_sid, c->as.sid);
	return 0;
}

/* Ends the kvarena session: its blocks go back, except those the prefix
 * cache (or another conversation) still references. Tokens and text stay,
 * so the conversation can be recomputed when it returns. */
void kvd_conv_drop_kv(struct kvd *d, struct kvd_conv *c)
{
	struct kva_session_info si = { .size = sizeof(si) };

	kvd_tiering_abandon(d, c);
	kvd_prefix_pending_drop(d, c);
	if (!c->has_kv)
		return;
	/* what it held idle, for kvarenad_kv_idle_byte_seconds_total */
	if (kva_session_get_info(d->arena, c->as.sid, &si) == 0)
		d->m.idle_byte_s_ended += si.idle_byte_sec;
	kvd_blocks_hold(d, c, 0, c->as.s.n_blocks, -1);
	kvd_hmap_del(&d->conv_by_sid, &c->by_sid);
	kve_arena_session_close(d->kv, &c->as);
	memset(&c->as, 0, sizeof(c->as));
	c->has_kv = 0;
	c->turn_restored = 0;	/* gone again: recomputed, not restored */
	kvd_prefix_offered_to(c, 0);
	c->kstate = KVA_STATE_ENDED;
}

/* Gives back every block; the session stays (tiering.c: its KV is on disk
 * or recomputed, and the kernel still sees its tool wait). */
void kvd_conv_free_blocks(struct kvd *d, struct kvd_conv *c)
{
	int rc;

	if (!c->has_kv)
		return;
	kvd_prefix_pending_drop(d, c);
	if (c->as.s.n_blocks) {
		kvd_blocks_hold(d, c, 0, c->as.s.n_blocks, -1);
		rc = kva_blocks_free(d->arena, c->as.sid, c->as.s.n_blocks, c->as.s.block_table);
		if (rc < 0)
			kvd_log(KVD_LOG_WARN, "conv", "%s: freeing %u blocks: %s", c->id,
				c->as.s.n_blocks, strerror(-rc));
	}
	c->as.s.n_blocks = 0;
	c->as.s.n_tokens = 0;
	c->turn_restored = 0;
	kvd_prefix_offered_to(c, 0);
}

void kvd_conv_detach_kv(struct kvd *d, struct kvd_conv *c, struct kve_arena_session *out)
{
	kvd_prefix_pending_drop(d, c);
	kvd_blocks_hold(d, c, 0, c->as.s.n_blocks, -1);
	if (c->has_kv)
		kvd_hmap_del(&d->conv_by_sid, &c->by_sid);
	*out = c->as;
	memset(&c->as, 0, sizeof(c->as));
	c->has_kv = 0;
	kvd_prefix_offered_to(c, 0);
	c->kstate = KVA_STATE_ENDED;
}

/* Blocks for n_more positions after the KV. */
int kvd_conv_reserve(struct kvd *d, struct kvd_conv *c, uint32_t n_more)
{
	return kvd_conv_reserve_to(d, c, c->as.s.n_tokens + n_more);
}

void kvd_conv_free(struct kvd *d, struct kvd_conv *c)
{
	kvd_tiering_forget(d, c);
	kvd_agent_forget(d, c);
	kvd_conv_drop_kv(d, c);
	text_unindex(d, c);
	dl_remove(d, c);
	list_del(d, c);
	kvd_hmap_del(&d->conv_by_id, &c->by_id);
	d->n_convs--;
	free(c->tokens);
	free(c->tok_end);
	free(c->text);
	free(c->cls);
	free(c->nodes);
	free(c);
}

struct kvd_conv *kvd_conv_find_id(struct kvd *d, const char *id)
{
	struct kvd_hnode *e;

	for (e = kvd_hmap_first(&d->conv_by_id, id_key(id)); e; e = kvd_hmap_next(e)) {
		struct kvd_conv *c = (struct kvd_conv *)((char *)e - offsetof(struct kvd_conv, by_id));

		if (!strcmp(c->id, id))
			return c;
	}
	return NULL;
}

struct kvd_conv *kvd_conv_by_sid(struct kvd *d, uint64_t sid)
{
	struct kvd_hnode *e;

	for (e = kvd_hmap_first(&d->conv_by_sid, sid); e; e = kvd_hmap_next(e)) {
		struct kvd_conv *c = (struct kvd_conv *)((char *)e - offsetof(struct kvd_conv, by_sid));

		if (c->has_kv && c->as.sid == sid)
			return c;
	}
	return NULL;
}

/* ---- finding the conversation a prompt continues --------------------------- */

/*
 * Outside the lock: the prompt's prefixes whose text key the filter has
 * seen (length and key), longest last, at most max (the longest ones).
 * The filter's counters are read without the lock: a stale read only adds
 * or misses a candidate that the locked check settles (a conversation
 * indexed meanwhile is simply not continued by this request).
 */
uint32_t kvd_conv_candidates(const struct kvd *d, uint32_t tenant, const char *prompt,
			     size_t len, struct kvd_cand *out, uint32_t max)
{
	uint64_t h = 0xcbf29ce484222325ull;
	uint32_t n = 0;
	size_t k;

	if (!d->cfg.retention || len >= UINT32_MAX || !max)
		return 0;
	for (k = 0; k < len; k++) {
		uint64_t key;

		h = (h ^ (uint8_t)prompt[k]) * FNV_PRIME;
		key = text_key(d, tenant, h);
		if (!filter_has(d, key))
			continue;
		if (n == max) {		/* keep the longest */
			memmove(out, out + 1, (max - 1) * sizeof(*out));
			n--;
		}
		out[n].len = (uint32_t)(k + 1);
		out[n++].key = key;
	}
	return n;
}

/*
 * Under the lock: the idle conversation of the job's tenant whose whole
 * text is the prompt's prefix at the longest candidate, claimed for the
 * job (taken out of the index: nobody else continues it meanwhile), or
 * NULL. A candidate costs a probe, and a compare only on a key match.
 */
struct kvd_conv *kvd_conv_claim(struct kvd *d, struct kvd_job *j, const char *prompt,
				const struct kvd_markup *m, const struct kvd_cand *cand,
				uint32_t n)
{
	while (n--) {
		struct kvd_hnode *e;

		for (e = kvd_hmap_first(&d->conv_by_text, cand[n].key); e; e = kvd_hmap_next(e)) {
			struct kvd_conv *c = (struct kvd_conv *)((char *)e -
							  offsetof(struct kvd_conv, by_text));

			if (c->tenant != j->tenant || c->job || c->delete_pending ||
			    c->text_len != cand[n].len || memcmp(c->text, prompt, cand[n].len))
				continue;
			/* the same bytes, but markup where the prompt has plain
			 * text (or the other way round): not the same tokens */
			if (kvd_markup_agree(c->cls, c->text_len, m ? m->spans : NULL,
					     m ? m->n : 0, m != NULL) < c->text_len)
				continue;
			text_unindex(d, c);
			c->job = j;
			return c;
		}
	}
	return NULL;
}

/* The job let go of the conversation: it can be continued again. */
void kvd_conv_release(struct kvd *d, struct kvd_conv *c)
{
	c->job = NULL;
	kvd_conv_touch(d, c);
	text_index(d, c);
}

/* ---- tokens and text --------------------------------------------------------- */

static int grow_tokens(struct kvd_conv *c, uint32_t need)
{
	uint32_t cap = c->cap_tokens ? c->cap_tokens : 256;
	int32_t *t;
	uint32_t *e;

	if (need <= c->cap_tokens)
		return 0;
	while (cap < need)
		cap *= 2;
	t = realloc(c->tokens, cap * sizeof(*t));
	if (!t)
		return -ENOMEM;
	c->tokens = t;
	e = realloc(c->tok_end, cap * sizeof(*e));
	if (!e)
		return -ENOMEM;
	c->tok_end = e;
	c->cap_tokens = cap;
	return 0;
}

/* The text grows by len bytes of unknown kind (the model's own reply);
 * kvd_conv_append_tokens marks its prompts' kinds after. */
int kvd_conv_append_text(struct kvd_conv *c, const char *text, size_t len)
{
	if (c->text_len + len + 1 > c->text_cap) {
		size_t cap = c->text_cap ? c->text_cap : 1024;
		char *t;
		uint8_t *k;

		while (cap < c->text_len + len + 1)
			cap *= 2;
		t = realloc(c->text, cap);
		if (!t)
			return -ENOMEM;
		t[c->text_len] = 0;	/* a first buffer too: a string if cls fails */
		c->text = t;
		k = realloc(c->cls, cap);
		if (!k)
			return -ENOMEM;
		c->cls = k;
		c->text_cap = cap;
	}
	memcpy(c->text + c->text_len, text, len);
	memset(c->cls + c->text_len, KVD_TEXT_ANY, len);
	c->text_len += len;
	c->text[c->text_len] = 0;
	c->text_hash = text_hash_more(c->text_hash, text, len);
	return 0;
}

int kvd_conv_push_token(struct kvd_conv *c, int32_t tok, const char *text, size_t n,
			int boundary)
{
	int rc = grow_tokens(c, c->n_tokens + 1);

	if (!rc && n)
		rc = kvd_conv_append_text(c, text, n);
	if (rc)
		return rc;
	c->tokens[c->n_tokens] = tok;
	c->tok_end[c->n_tokens] = boundary && c->text_len < UINT32_MAX ?
				  (uint32_t)c->text_len : UINT32_MAX;
	c->n_tokens++;
	return 0;
}

/*
 * Tokenizes text for appending to a conversation (add_bos: it starts one),
 * without the orchestrator's lock: the tokenizer is read-only. With m,
 * special tokens only in the markup (markup.c) and the text's kinds
 * known; without, no special tokens and kinds unknown (the model's own
 * reply). Each token's end offset is known when the tokens' bytes add up
 * to the text (byte-level BPE); SentencePiece adds a dummy-prefix space,
 * taken off the first token. Otherwise only the end of the whole piece is
 * a boundary.
 */
int kvd_piece_make(const struct kvd *d, const char *text, size_t len, int add_bos,
		   const struct kvd_markup *m, struct kvd_piece *pc)
{
	size_t sum = 0;
	int n, i, rc;
	char buf[256];

	memset(pc, 0, sizeof(*pc));
	if (len > UINT32_MAX / 2)
		return -E2BIG;
	pc->text = malloc(len + 1);
	pc->cls = malloc(len + 1);
	if (!pc->text || !pc->cls) {
		kvd_piece_free(pc);
		return -ENOMEM;
	}
	if (m) {
		n = kvd_markup_tokenize(d, text, len, m->spans, m->n, m->off, add_bos, &pc->ids);
		if (n < 0) {
			kvd_piece_free(pc);
			return n;
		}
	} else {
		/* a piece appended to a conversation continues its text:
		 * no SentencePiece dummy-prefix space (a raw prompt's
		 * markers are plain text, and "the" would come out as
		 * " the"); the first piece has it, as llama.cpp encodes */
		unsigned flags = add_bos ? KVE_TOKENIZE_BOS : KVE_TOKENIZE_CONT;

		n = kve_tokenize_spans(d->tok, text, len, NULL, 0, flags, NULL, 0);
		if (n < 0) {
			kvd_piece_free(pc);
			return n;
		}
		pc->ids = malloc(((size_t)n + 1) * sizeof(*pc->ids));
		if (!pc->ids) {
			kvd_piece_free(pc);
			return -ENOMEM;
		}
		rc = kve_tokenize_spans(d->tok, text, len, NULL, 0, flags, pc->ids, (size_t)n);
		if (rc < 0) {
			kvd_piece_free(pc);
			return rc;
		}
	}
	pc->ends = malloc(((size_t)n + 1) * sizeof(*pc->ends));
	if (!pc->ends) {
		kvd_piece_free(pc);
		return -ENOMEM;
	}
	memcpy(pc->text, text, len);
	pc->text[len] = 0;
	pc->len = len;
	kvd_markup_classes(pc->cls, len, m ? m->spans : NULL, m ? m->n : 0, m ? m->off : 0,
			   m != NULL);
	for (i = 0; i < n; i++) {
		int b = (add_bos && i == 0) ? 0 : kvd_markup_token_bytes(d, pc->ids[i], buf,
									 sizeof(buf));

		if (b < 0)
			b = 0;
		if (add_bos && i == 1 && kve_tokenizer_kind(d->tok) == KVE_TOK_SPM &&
		    b > 0 && buf[0] == ' ' && (len == 0 || text[0] != ' '))
			b--;	/* the dummy prefix (the first piece's only) */
		sum += (size_t)b;
		pc->ends[i] = (uint32_t)sum;
	}
	for (i = 0; i < n; i++)
		if (sum != len || pc->ends[i] > len)
			pc->ends[i] = UINT32_MAX;
	if (n)
		pc->ends[n - 1] = (uint32_t)len;
	pc->n = (uint32_t)n;
	return 0;
}

void kvd_piece_free(struct kvd_piece *pc)
{
	free(pc->ids);
	free(pc->ends);
	free(pc->text);
	free(pc->cls);
	memset(pc, 0, sizeof(*pc));
}

/* Appends a tokenized piece (its text and ids); copies only. */
int kvd_conv_append_piece(struct kvd_conv *c, const struct kvd_piece *pc)
{
	size_t base = c->text_len;
	uint32_t i;
	int rc;

	if (base + pc->len >= UINT32_MAX)
		return -E2BIG;
	rc = grow_tokens(c, c->n_tokens + pc->n);
	if (!rc)
		rc = kvd_conv_append_text(c, pc->text, pc->len);
	if (rc)
		return rc;
	memcpy(c->cls + base, pc->cls, pc->len);
	for (i = 0; i < pc->n; i++) {
		c->tokens[c->n_tokens + i] = pc->ids[i];
		c->tok_end[c->n_tokens + i] = pc->ends[i] == UINT32_MAX ? UINT32_MAX :
					      (uint32_t)(base + pc->ends[i]);
	}
	c->n_tokens += pc->n;
	return 0;
}

/*
 * Keep the first n tokens; their KV too, as far as it exists. A block that
 * other holders (the cache, another conversation) share is never written
 * again: when the cut falls inside one, that block is given back and its
 * kept tokens are prefilled anew into a private block. Only the
 * conversation's own job cuts it (a stop sequence); the state is checked
 * before anything changes.
 */
int kvd_conv_truncate(struct kvd *d, struct kvd_conv *c, uint32_t n)
{
	uint32_t bt = d->geom.block_tokens, keep_blocks, kv;
	int rc;

	if (n > c->n_tokens || (n && c->tok_end[n - 1] == UINT32_MAX))
		return -EINVAL;
	/* a restore must not write into blocks this cut gives back */
	kvd_tiering_abandon(d, c);
	c->n_tokens = n;
	memset(&c->match, 0, sizeof(c->match));	/* other tokens may follow */
	c->text_len = n ? c->tok_end[n - 1] : 0;
	if (c->text)
		c->text[c->text_len] = 0;
	c->text_hash = text_hash_more(0xcbf29ce484222325ull, c->text, c->text_len);
	if (!c->has_kv)
		return 0;
	kv = c->as.s.n_tokens < n ? c->as.s.n_tokens : n;
	keep_blocks = (kv + bt - 1) / bt;
	if (kv % bt) {
		uint32_t last = c->as.s.block_table[keep_blocks - 1];

		if (d->block_users[last] > 1 || kvd_prefix_cached(d, last)) {
			keep_blocks--;
			kv = keep_blocks * bt;
		}
	}
	if (keep_blocks < c->as.s.n_blocks) {
		uint32_t drop = c->as.s.n_blocks - keep_blocks;

		kvd_blocks_hold(d, c, keep_blocks, c->as.s.n_blocks, -1);
		rc = kva_blocks_free(d->arena, c->as.sid, drop,
				     c->as.s.block_table + keep_blocks);
		if (rc < 0)
			kvd_log(KVD_LOG_WARN, "conv", "%s: freeing %u blocks: %s", c->id, drop,
				strerror(-rc));
		c->as.s.n_blocks = keep_blocks;
	}
	c->as.s.n_tokens = kv;
	if (c->n_offered > kv / bt)
		kvd_prefix_offered_to(c, kv / bt);
	return 0;
}

/* Blocks for the positions up to total (KV and what is scheduled): on a
 * full arena, room is made (cache, then idle victims; unless make_room
 * is 0) and the allocation retried once; -ENOSPC when that is not enough
 * (the caller preempts), -EDQUOT past the tenant's kv_blocks. */
static int reserve(struct kvd *d, struct kvd_conv *c, uint32_t total, int make_room)
{
	uint32_t before = c->as.s.n_blocks, bt = d->geom.block_tokens;
	uint32_t need = (total + bt - 1) / bt;
	int rc;

	if (need <= before)
		return 0;
	if (total > c->as.cap * bt)
		return -E2BIG;
	if (kvd_tenant_slot(d, c->tenant)) {
		uint32_t slot = kvd_tenant_slot(d, c->tenant);
		uint32_t lim = d->cfg.tenants[slot - 1].kv_blocks;

		if (lim && d->tenant_blocks[slot] + (need - before) > lim)
			return -EDQUOT;
	}
#ifdef KVD_TEST_HOOKS
	if (d->test_reserve_fail) {
		rc = d->test_reserve_fail;
		d->test_reserve_fail = 0;
		return rc;
	}
#endif
	rc = kve_arena_session_reserve(d->kv, &c->as, total - c->as.s.n_tokens);
	if (rc == -ENOSPC && make_room) {
		/* make room for more than this one step: evicting a victim per
		 * decode step would cost every step a search */
		kvd_make_room(d, need - before + d->geom.blocks_total / 16);
		rc = kve_arena_session_reserve(d->kv, &c->as, total - c->as.s.n_tokens);
	}
	if (rc)
		return rc;
	kvd_blocks_hold(d, c, before, c->as.s.n_blocks, +1);
	return 0;
}

int kvd_conv_reserve_to(struct kvd *d, struct kvd_conv *c, uint32_t total)
{
	return reserve(d, c, total, 1);
}

int kvd_conv_reserve_free(struct kvd *d, struct kvd_conv *c, uint32_t n_more)
{
	return reserve(d, c, c->as.s.n_tokens + n_more, 0);
}
