// SPDX-License-Identifier: MIT
/*
 * conv.c - conversations: one kvarena session per conversation, its token
 * history and the text those tokens stand for.
 *
 * A follow-up request (the next turn, or the request carrying tool
 * results) is found by text: the rendered prompt of turn N+1 starts with
 * the text of turn N's prompt and reply when the chat rendering is
 * byte-stable, so the longest conversation whose text the prompt repeats
 * keeps its KV and only the new text is tokenized and prefilled. Matching
 * text rather than re-tokenized ids also keeps the model's own sampled
 * tokens, which a re-tokenization of the reply would not reproduce.
 *
 * Not here: which blocks are cached (prefix.c), kernel states (kstate.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "internal.h"
#include "log.h"

static void list_del(struct kvd *d, struct kvd_conv *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		d->convs = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
}

static void list_push(struct kvd *d, struct kvd_conv *c)
{
	c->next = d->convs;
	c->prev = NULL;
	if (d->convs)
		d->convs->prev = c;
	d->convs = c;
}

void kvd_conv_touch(struct kvd_conv *c)
{
	c->last_used_ns = kvd_now_ns();
}

uint32_t kvd_conv_blocks(const struct kvd_conv *c)
{
	return c->has_kv ? c->as.s.n_blocks : 0;
}

struct kvd_conv *kvd_conv_new(struct kvd *d, uint32_t tenant, const char *key)
{
	struct kvd_conv *c;
	uint8_t rnd[12];
	int i;

	/* forget the least recently used idle conversation past the cap */
	if (d->n_convs >= d->cfg.max_sessions) {
		struct kvd_conv *old = d->convs, *victim = NULL;

		for (; old; old = old->next)
			if (!old->job)
				victim = old;
		if (!victim)
			return NULL;
		kvd_conv_free(d, victim);
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
	if (key && !(c->key = strdup(key))) {
		free(c);
		return NULL;
	}
	c->kstate = KVA_STATE_IDLE;
	kvd_conv_touch(c);
	list_push(d, c);
	d->n_convs++;
	return c;
}

static void count_blocks(struct kvd *d, struct kvd_conv *c, uint32_t from,
			 uint32_t to, int delta)
{
	uint32_t i;

	for (i = from; i < to; i++)
		d->block_users[c->as.s.block_table[i]] += (uint16_t)delta;
	uint32_t slot = kvd_tenant_slot(d, c->tenant);

	if (slot)
		d->tenant_blocks[slot] += (uint32_t)(delta * (int)(to - from));
}

int kvd_conv_open_kv(struct kvd *d, struct kvd_conv *c)
{
	int rc;

	if (c->has_kv)
		return 0;
	static uint64_t serial;

	/* the cookie operators see (kvactl): a serial, not an address */
	rc = kve_arena_session_open(d->kv, ++serial, d->ctx_len, &c->as);
	if (rc)
		return rc;
	c->has_kv = 1;
	c->n_hashed = 0;
	c->kstate = KVA_STATE_IDLE;
	return 0;
}

/* Ends the kvarena session: its blocks go back, except those the prefix
 * cache (or another conversation) still references. Tokens and text stay,
 * so the conversation can be recomputed when it returns. */
void kvd_conv_drop_kv(struct kvd *d, struct kvd_conv *c)
{
	struct kva_session_info si = { .size = sizeof(si) };

	kvd_tiering_abandon(d, c);
	if (!c->has_kv)
		return;
	/* what it held idle, for kvarenad_kv_idle_byte_seconds_total */
	if (kva_session_get_info(d->arena, c->as.sid, &si) == 0)
		d->m.idle_byte_s_ended += si.idle_byte_sec;
	count_blocks(d, c, 0, c->as.s.n_blocks, -1);
	kve_arena_session_close(d->kv, &c->as);
	memset(&c->as, 0, sizeof(c->as));
	c->has_kv = 0;
	c->n_hashed = 0;
	c->kstate = KVA_STATE_ENDED;
}

/* Gives back every block; the session stays (tiering.c: its KV is on disk
 * or recomputed, and the kernel still sees its tool wait). */
void kvd_conv_free_blocks(struct kvd *d, struct kvd_conv *c)
{
	int rc;

	if (!c->has_kv)
		return;
	if (c->as.s.n_blocks) {
		count_blocks(d, c, 0, c->as.s.n_blocks, -1);
		rc = kva_blocks_free(d->arena, c->as.sid, c->as.s.n_blocks, c->as.s.block_table);
		if (rc < 0)
			kvd_log(KVD_LOG_WARN, "conv", "%s: freeing %u blocks: %s", c->id,
				c->as.s.n_blocks, strerror(-rc));
	}
	c->as.s.n_blocks = 0;
	c->as.s.n_tokens = 0;
	c->n_hashed = 0;
}

void kvd_conv_detach_kv(struct kvd *d, struct kvd_conv *c, struct kve_arena_session *out)
{
	count_blocks(d, c, 0, c->as.s.n_blocks, -1);
	*out = c->as;
	memset(&c->as, 0, sizeof(c->as));
	c->has_kv = 0;
	c->n_hashed = 0;
	c->kstate = KVA_STATE_ENDED;
}

void kvd_conv_free(struct kvd *d, struct kvd_conv *c)
{
	kvd_tiering_forget(d, c);
	kvd_agent_forget(d, c);
	kvd_conv_drop_kv(d, c);
	list_del(d, c);
	d->n_convs--;
	free(c->key);
	free(c->tokens);
	free(c->tok_end);
	free(c->text);
	free(c->cls);
	free(c->hashes);
	free(c);
}

struct kvd_conv *kvd_conv_find_id(struct kvd *d, const char *id)
{
	struct kvd_conv *c;

	for (c = d->convs; c; c = c->next)
		if (!strcmp(c->id, id))
			return c;
	return NULL;
}

static size_t common_prefix(const char *a, size_t na, const char *b, size_t nb)
{
	size_t n = na < nb ? na : nb, i = 0;

	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* Tokens [0, k) whose text lies within the first len bytes. */
static uint32_t tokens_within(const struct kvd_conv *c, size_t len)
{
	uint32_t k = c->n_tokens;

	while (k > 0 && (c->tok_end[k - 1] == UINT32_MAX || c->tok_end[k - 1] > len))
		k--;
	return k;
}

/*
 * A request continues a conversation when it repeats the conversation's
 * whole text (the next turn, or the request bringing tool results), or
 * names it by session key (then a partial match truncates it: a client
 * that edits or regenerates). Another conversation that merely shares a
 * prefix (the same system prompt) gets a session of its own, sharing the
 * prefix's blocks through the prefix cache instead.
 */
struct kvd_conv *kvd_conv_match(struct kvd *d, uint32_t tenant, const char *key,
				const char *prompt, size_t len, const struct kvd_markup *m,
				uint32_t *keep)
{
	struct kvd_conv *c, *best = NULL;
	uint32_t best_k = 0;

	*keep = 0;
	for (c = d->convs; c; c = c->next) {
		uint32_t k;
		size_t l;

		if (c->tenant != tenant || c->job || c->delete_pending || !c->n_tokens)
			continue;
		if (key && c->key && strcmp(key, c->key))
			continue;
		l = common_prefix(c->text, c->text_len, prompt, len);
		/* the same bytes, but markup where the prompt has plain text
		 * (or the other way round): not the same tokens */
		l = kvd_markup_agree(c->cls, l, m ? m->spans : NULL, m ? m->n : 0, m != NULL);
		if (l < c->text_len && !(key && c->key))
			continue;
		k = tokens_within(c, l);
		/* keep at least one token to prefill: it gives the logits */
		if (k && c->tok_end[k - 1] == len)
			k--;
		if (k > best_k) {
			best = c;
			best_k = k;
		}
	}
	*keep = best_k;
	return best;
}

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
 * Appends text and its tokens. Each token's end offset is known when the
 * tokens' bytes add up to the text (byte-level BPE); SentencePiece adds a
 * dummy-prefix space, which is taken off the first token. Otherwise only
 * the end of the whole piece is a boundary.
 */
int kvd_conv_append_tokens(struct kvd *d, struct kvd_conv *c, const char *text,
			   size_t len, int add_bos, const struct kvd_markup *m)
{
	size_t base = c->text_len, sum = 0;
	int32_t *ids;
	int n, i, rc, exact;
	char buf[256];

	if (m) {	/* special tokens only in the markup (markup.c) */
		n = kvd_markup_tokenize(d, text, len, m->spans, m->n, m->off, add_bos, &ids);
		if (n < 0)
			return n;
		rc = n;
		if (grow_tokens(c, c->n_tokens + (uint32_t)n)) {
			free(ids);
			return -ENOMEM;
		}
		goto tokenized;
	}
	n = kve_tokenize(d->tok, text, len, add_bos, NULL, 0);
	if (n < 0)
		return n;
	ids = malloc(((size_t)n + 1) * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	rc = kve_tokenize(d->tok, text, len, add_bos, ids, (size_t)n);
	if (rc < 0 || grow_tokens(c, c->n_tokens + (uint32_t)n)) {
		free(ids);
		return rc < 0 ? rc : -ENOMEM;
	}
	/* SentencePiece puts a dummy-prefix space before every text it
	 * encodes; a piece appended to a conversation continues a text, and
	 * the chat template starts each with a marker (<|im_end|>...), so a
	 * lone leading space token is that prefix: drop it, and the tokens
	 * equal those of the whole conversation encoded at once (the markup
	 * path gives no dummy prefix to a continuation at all) */
	if (!add_bos && n > 1 && kve_tokenizer_kind(d->tok) == KVE_TOK_SPM &&
	    len && text[0] != ' ' &&
	    kve_token_bytes(d->tok, ids[0], buf, sizeof(buf)) == 1 && buf[0] == ' ') {
		memmove(ids, ids + 1, (size_t)(n - 1) * sizeof(*ids));
		n--;
	}
tokenized:
	rc = kvd_conv_append_text(c, text, len);
	if (rc) {
		free(ids);
		return rc;
	}
	kvd_markup_classes(c->cls + base, len, m ? m->spans : NULL, m ? m->n : 0, m ? m->off : 0,
			   m != NULL);
	for (i = 0; i < n; i++) {
		int b = (add_bos && i == 0) ? 0 : kvd_markup_token_bytes(d, ids[i], buf, sizeof(buf));

		if (b < 0)
			b = 0;
		if (i == (add_bos ? 1 : 0) && kve_tokenizer_kind(d->tok) == KVE_TOK_SPM &&
		    b > 0 && buf[0] == ' ' && (len == 0 || text[0] != ' '))
			b--;	/* the dummy prefix */
		sum += (size_t)b;
		c->tokens[c->n_tokens + (uint32_t)i] = ids[i];
		c->tok_end[c->n_tokens + (uint32_t)i] = (uint32_t)(base + sum);
	}
	exact = sum == len;
	for (i = 0; i < n; i++)
		if (!exact || c->tok_end[c->n_tokens + (uint32_t)i] > base + len)
			c->tok_end[c->n_tokens + (uint32_t)i] = UINT32_MAX;
	if (n)
		c->tok_end[c->n_tokens + (uint32_t)n - 1] = (uint32_t)(base + len);
	c->n_tokens += (uint32_t)n;
	free(ids);
	return 0;
}

/*
 * Keep the first n tokens; their KV too, as far as it exists. A block that
 * other holders (the cache, another conversation) share is never written
 * again: when the cut falls inside one, that block is given back and its
 * kept tokens are prefilled anew into a private block.
 */
int kvd_conv_truncate(struct kvd *d, struct kvd_conv *c, uint32_t n)
{
	uint32_t bt = d->geom.block_tokens, keep_blocks, kv;
	int rc;

	if (n > c->n_tokens)
		return -EINVAL;
	/* a restore must not write into blocks this cut gives back */
	kvd_tiering_abandon(d, c);
	c->n_tokens = n;
	c->text_len = n ? c->tok_end[n - 1] : 0;
	if (n && c->tok_end[n - 1] == UINT32_MAX)
		return -EINVAL;
	if (c->text)
		c->text[c->text_len] = 0;
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

		count_blocks(d, c, keep_blocks, c->as.s.n_blocks, -1);
		rc = kva_blocks_free(d->arena, c->as.sid, drop,
				     c->as.s.block_table + keep_blocks);
		if (rc < 0)
			kvd_log(KVD_LOG_WARN, "conv", "%s: freeing %u blocks: %s", c->id, drop,
				strerror(-rc));
		c->as.s.n_blocks = keep_blocks;
	}
	c->as.s.n_tokens = kv;
	if (c->n_hashed > kv / bt)
		c->n_hashed = kv / bt;
	return 0;
}

/* Blocks for n_more positions after the KV; on a full arena, room is made
 * (cache, then victims) and the allocation retried once. */
int kvd_conv_reserve(struct kvd *d, struct kvd_conv *c, uint32_t n_more)
{
	uint32_t before = c->as.s.n_blocks, bt = d->geom.block_tokens;
	uint32_t need = (c->as.s.n_tokens + n_more + bt - 1) / bt;
	int rc;

	if (need <= before)
		return 0;
	if (kvd_tenant_slot(d, c->tenant)) {
		uint32_t slot = kvd_tenant_slot(d, c->tenant);
		uint32_t lim = d->cfg.tenants[slot - 1].kv_blocks;

		if (lim && d->tenant_blocks[slot] + (need - before) > lim)
			return -EDQUOT;
	}
	rc = kve_arena_session_reserve(d->kv, &c->as, n_more);
	if (rc == -ENOSPC && need <= c->as.cap) {
		/* make room for more than this one step: evicting a victim per
		 * decode step would cost every step a scan */
		kvd_make_room(d, need - before + d->geom.blocks_total / 16);
		rc = kve_arena_session_reserve(d->kv, &c->as, n_more);
	}
	if (rc)
		return rc;
	count_blocks(d, c, before, c->as.s.n_blocks, +1);
	return 0;
}
