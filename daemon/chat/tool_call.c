// SPDX-License-Identifier: MIT
/*
 * tool_call.c - splitting generated text into content and tool calls, in
 * one pass that works on a stream (see tool_call.h for the rules): the
 * stream itself (a leading think block, then the family's syntax), and
 * the Hermes syntax (<tool_call> blocks anywhere in the reply). Owns the
 * canonical text of a Hermes call; the chatml template renders assistant
 * turns the same way, so that both sides agree byte for byte. The
 * syntaxes whose calls end the reply are tool_call_tail.c's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <jansson.h>

#include "chat_internal.h"

static int is_ws(char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

int tc_valid_name(const char *s, size_t len)
{
	if (len == 0 || len > TC_MAX_NAME)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

void tc_make_id(char out[TC_ID_LEN + 1])
{
	static const char alnum[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	unsigned char r[TC_ID_LEN - 5];
	size_t got = 0;

	while (got < sizeof(r)) {
		ssize_t n = getrandom(r + got, sizeof(r) - got, 0);

		if (n > 0)
			got += (size_t)n;
		else if (n < 0 && errno != EINTR)
			abort();	/* getrandom(2) cannot fail for 19 bytes */
	}
	memcpy(out, "call_", 5);
	for (size_t i = 0; i < sizeof(r); i++)
		out[5 + i] = alnum[r[i] % (sizeof(alnum) - 1)];
	out[TC_ID_LEN] = '\0';
}

void tc_render_call(struct strbuf *b, const struct tc_tags *t,
		    const char *name, const char *args, size_t args_len)
{
	/* names are [A-Za-z0-9_-]: nothing to escape */
	sb_adds(b, t->open);
	sb_adds(b, "\n{\"name\": \"");
	sb_adds(b, name);
	sb_adds(b, "\", \"arguments\": ");
	sb_add(b, args, args_len);
	sb_adds(b, "}\n");
	sb_adds(b, t->close);
}

void tc_render_body(struct strbuf *b, const struct tc_tags *t,
		    const char *content, size_t content_len,
		    const struct tc_call *calls, size_t n_calls)
{
	sb_add(b, content, content_len);
	for (size_t i = 0; i < n_calls; i++) {
		if (i > 0 || content_len > 0)
			sb_adds(b, TC_SEP);
		tc_render_call(b, t, calls[i].name, calls[i].arguments,
			       calls[i].arguments_len);
	}
}

/* ---- finding the verbatim "arguments" value in a valid JSON object ---- */

static size_t skip_ws(const char *s, size_t n, size_t i)
{
	while (i < n && is_ws(s[i]))
		i++;
	return i;
}

/* s[i] == '"': the index after the closing quote */
static size_t skip_string(const char *s, size_t n, size_t i)
{
	for (i++; i < n; i++) {
		if (s[i] == '\\')
			i++;
		else if (s[i] == '"')
			return i + 1;
	}
	return n;
}

static size_t skip_value(const char *s, size_t n, size_t i)
{
	size_t depth = 0;

	if (i < n && s[i] == '"')
		return skip_string(s, n, i);
	if (i < n && s[i] != '{' && s[i] != '[') {
		while (i < n && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' &&
		       s[i] != ']')
			i++;
		return i;
	}
	while (i < n) {
		char c = s[i];

		if (c == '"') {
			i = skip_string(s, n, i);
			continue;
		}
		if (c == '{' || c == '[')
			depth++;
		else if ((c == '}' || c == ']') && --depth == 0)
			return i + 1;
		i++;
	}
	return n;
}

/* The body is already known to be one valid JSON object. */
int tc_find_member(const char *s, size_t n, const char *key, size_t *off, size_t *len)
{
	size_t kl = strlen(key);

	size_t i = skip_ws(s, n, 0);

	if (i >= n || s[i] != '{')
		return -1;
	for (i++;;) {
		size_t k, v;

		i = skip_ws(s, n, i);
		if (i >= n || s[i] != '"')
			return -1;
		k = i;
		i = skip_string(s, n, i);
		i = skip_ws(s, n, i);
		if (i >= n || s[i] != ':')
			return -1;
		i = skip_ws(s, n, i + 1);
		v = i;
		i = skip_value(s, n, i);
		if (k + kl + 2 <= n && s[k + 1 + kl] == '"' && !memcmp(s + k + 1, key, kl) &&
		    skip_string(s, n, k) == k + kl + 2) {
			*off = v;
			*len = i - v;
			return 0;
		}
		i = skip_ws(s, n, i);
		if (i >= n || s[i] != ',')
			return -1;
		i++;
	}
}

/* A well-formed call body: {"name": NAME, "arguments": {...}} in any key
 * order and spacing; name copied to namebuf, arguments point into body. */
static int check_call(const char *body, size_t len, struct tc_call *call,
		      char namebuf[TC_MAX_NAME + 1])
{
	json_t *root, *name, *args;
	size_t off, alen;
	int ok = 0;

	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
	if (!root)
		return 0;
	name = json_object_get(root, "name");
	args = json_object_get(root, "arguments");
	if (json_is_object(root) && json_object_size(root) == 2 &&
	    json_is_string(name) && json_is_object(args) &&
	    tc_valid_name(json_string_value(name), json_string_length(name)) &&
	    !tc_find_member(body, len, "arguments", &off, &alen)) {
		memcpy(namebuf, json_string_value(name),
		       json_string_length(name) + 1);
		memset(call, 0, sizeof(*call));
		tc_make_id(call->id);
		call->name = namebuf;
		call->arguments = body + off;
		call->arguments_len = alen;
		ok = 1;
	}
	json_decref(root);
	return ok;
}

/* ---- the stream ---- */

#define TC_MAX_TAIL 256		/* bytes between arguments and close tag */
#define TC_MAX_HEAD (TC_MAX_NAME + 512)	/* a loose head, up to its "{" */

void tc_stream_init(struct tc_stream *s, const struct chat_template *t,
		    tc_emit_fn emit, void *ctx)
{
	memset(s, 0, sizeof(*s));
	s->t = t;
	s->syn = t->f->syntax;
	s->think = t->f->think;
	s->tags = t->tags;
	s->emit = emit;
	s->ctx = ctx;
	s->phase = TC_OUT;
}

void tc_stream_reasoning(struct tc_stream *s, int on)
{
	s->reasoning = on;
}

void tc_stream_calls(struct tc_stream *s, int on)
{
	s->no_calls = !on;
}

void tc_stream_forced(struct tc_stream *s, const char *name)
{
	if (s->syn == TC_SYN_HERMES && name && tc_valid_name(name, strlen(name)))
		s->forced = name;
}

void tc_stream_constrained(struct tc_stream *s, int on)
{
	s->loose = on;
}

void tc_emit(struct tc_stream *s, enum tc_event ev, const char *p,
	     size_t n, const struct tc_call *call)
{
	int r;

	if (s->err || ((ev == TC_CONTENT || ev == TC_CALL_ARGS || ev == TC_REASONING) && n == 0))
		return;
	r = s->emit(s->ctx, ev, p, n, call);
	if (r < 0)
		s->err = r;
}

#define emit tc_emit

static void out(struct tc_stream *s, const char *p, size_t n)
{
	emit(s, TC_CONTENT, p, n, NULL);
}

static int all_ws(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!is_ws(p[i]))
			return 0;
	return 1;
}

/* Longest proper prefix of tag that text ends with. */
size_t tc_partial_tag(const char *text, size_t n, const char *tag)
{
	size_t tl = strlen(tag);
	size_t k = tl - 1 < n ? tl - 1 : n;

	for (; k > 0; k--)
		if (!memcmp(text + n - k, tag, k))
			return k;
	return 0;
}

/* The block was not a call: everything since the segment's held
 * whitespace goes out as content. */
static void block_as_content(struct tc_stream *s, size_t block_len)
{
	out(s, s->ws.s, s->ws.len);
	out(s, s->tags.open, strlen(s->tags.open));
	out(s, s->block.s, block_len);
	s->seg_nonws = 1;
}

/* A call begins: the whitespace held before its open tag goes out first
 * (minus the separator "\n"), or not at all after another call. */
static void call_start(struct tc_stream *s, const struct tc_call *call)
{
	size_t wl = s->ws.len;

	if (s->forced_said == 1) {
		/* announced with the reply's first text (tc_stream_forced) */
		s->forced_said = 2;
		sb_reset(&s->ws);
		return;
	}
	if (s->n_calls == 0 || s->seg_nonws) {
		if (wl && s->ws.s[wl - 1] == '\n')
			wl--;
		out(s, s->ws.s, wl);
	}
	sb_reset(&s->ws);
	emit(s, TC_CALL_START, NULL, 0, call);
}

static void call_end(struct tc_stream *s)
{
	emit(s, TC_CALL_END, NULL, 0, NULL);
	s->n_calls++;
	s->seg_nonws = 0;
}

/* Leave the block: what is left of it is outside text again. */
static void leave_block(struct tc_stream *s, size_t used)
{
	sb_reset(&s->hold);
	sb_add(&s->hold, s->block.s + used, s->block.len - used);
	sb_reset(&s->block);
	sb_reset(&s->ws);
	s->phase = TC_OUT;
}

enum match { NO, PARTIAL, FULL };

/* A valid function name from b[start]: FULL with *end past it. */
static enum match scan_name(const char *b, size_t n, size_t start, size_t *end)
{
	size_t i = start;

	while (i < n && i - start <= TC_MAX_NAME && tc_valid_name(b + i, 1))
		i++;
	if (i - start > TC_MAX_NAME)
		return NO;
	if (i == n)
		return PARTIAL;
	if (i == start)
		return NO;
	*end = i;
	return FULL;
}

/* Does the block start as the canonical form does, up to the "{" opening
 * the arguments? *name_len and *args_at on FULL. */
static enum match canonical_head(const char *b, size_t n, size_t *name_off,
				 size_t *name_len, size_t *args_at)
{
	static const char p1[] = "\n{\"name\": \"", p2[] = "\", \"arguments\": {";
	size_t l1 = sizeof(p1) - 1, l2 = sizeof(p2) - 1, i, k;
	enum match m;

	if (n == 0)
		return PARTIAL;
	if (memcmp(b, p1, n < l1 ? n : l1))
		return NO;
	if (n <= l1)
		return PARTIAL;
	if ((m = scan_name(b, n, l1, &i)) != FULL)
		return m;
	k = n - i < l2 ? n - i : l2;
	if (memcmp(b + i, p2, k))
		return NO;
	if (k < l2)
		return PARTIAL;
	*name_off = l1;
	*name_len = i - l1;
	*args_at = i + l2 - 1;
	return FULL;
}

/* lit at *i, after whitespace where ws says so; past TC_MAX_HEAD, NO. */
static enum match expect(const char *b, size_t n, size_t *i, const char *lit, int ws)
{
	size_t l = strlen(lit), k;

	while (ws && *i < n && is_ws(b[*i]))
		(*i)++;
	if (*i > TC_MAX_HEAD)
		return NO;
	k = n - *i < l ? n - *i : l;
	if (memcmp(b + *i, lit, k))
		return NO;
	*i += k;
	return k < l ? PARTIAL : FULL;
}

/* The head in any JSON spacing, name first: for calls the decoder holds
 * to the tool grammar (tc_stream_constrained), whose spacing a model may
 * vary, while the block can only be a call. */
static enum match loose_head(const char *b, size_t n, size_t *name_off,
			     size_t *name_len, size_t *args_at)
{
	static const char *const before[] = { "{", "\"name\"", ":", "\"" };
	static const char *const after[] = { "\"", ",", "\"arguments\"", ":", "{" };
	size_t i = 0, start, k;
	enum match m;

	for (k = 0; k < 4; k++)
		if ((m = expect(b, n, &i, before[k], 1)) != FULL)
			return m;
	start = i;
	if ((m = scan_name(b, n, start, &i)) != FULL)
		return m;
	*name_off = start;
	*name_len = i - start;
	for (k = 0; k < 5; k++)	/* no whitespace inside the name's string */
		if ((m = expect(b, n, &i, after[k], k > 0)) != FULL)
			return m;
	*args_at = i - 1;
	return FULL;
}

/* After the arguments: whitespace, "}", whitespace, the close tag. */
static enum match tail(const char *b, size_t n, const char *close, size_t *used)
{
	size_t i = 0, cl = strlen(close), k;

	while (i < n && is_ws(b[i]))
		i++;
	if (i == n)
		return n > TC_MAX_TAIL ? NO : PARTIAL;
	if (b[i++] != '}')
		return NO;
	while (i < n && is_ws(b[i]))
		i++;
	k = n - i < cl ? n - i : cl;
	if (memcmp(b + i, close, k) || i > TC_MAX_TAIL)
		return NO;
	if (k < cl)
		return PARTIAL;
	*used = i + cl;
	return FULL;
}

/* Scan streamed arguments from the block's start; the length that ends
 * the object, or 0 while it goes on. */
static size_t scan_args(struct tc_stream *s, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = b[i];

		if (s->in_str) {
			if (s->esc)
				s->esc = 0;
			else if (c == '\\')
				s->esc = 1;
			else if (c == '"')
				s->in_str = 0;
		} else if (c == '"') {
			s->in_str = 1;
		} else if (c == '{' || c == '[') {
			s->depth++;
		} else if ((c == '}' || c == ']') && --s->depth == 0) {
			return i + 1;
		}
	}
	return 0;
}

static void in_block(struct tc_stream *s, size_t cl)
{
	const char *c;
	size_t body, used, name_off, name_len, args_at;
	char name[TC_MAX_NAME + 1];
	struct tc_call call;

	switch (s->phase) {
	case TC_HEAD:
		switch ((s->loose ? loose_head : canonical_head)(s->block.s, s->block.len,
								 &name_off, &name_len, &args_at)) {
		case FULL:
			memset(&call, 0, sizeof(call));
			tc_make_id(call.id);
			memcpy(name, s->block.s + name_off, name_len);
			name[name_len] = '\0';
			call.name = name;
			call_start(s, &call);
			sb_consume(&s->block, args_at);
			s->depth = s->in_str = s->esc = 0;
			s->phase = TC_ARGS;
			return;
		case PARTIAL:
			if (!memmem(s->block.s, s->block.len, s->tags.close, cl)) {
				s->phase = TC_HEAD;
				return;
			}
			/* closed before it looked canonical */
			__attribute__((fallthrough));
		case NO:
			s->phase = TC_WHOLE;
			return;
		}
		return;
	case TC_ARGS:
		used = scan_args(s, s->block.s, s->block.len);
		emit(s, TC_CALL_ARGS, s->block.s, used ? used : s->block.len, NULL);
		sb_consume(&s->block, used ? used : s->block.len);
		if (used)
			s->phase = TC_TAIL;
		return;
	case TC_TAIL:
		switch (tail(s->block.s, s->block.len, s->tags.close, &used)) {
		case PARTIAL:
			return;
		case FULL:
			call_end(s);
			leave_block(s, used);
			return;
		case NO:
			call_end(s);
			leave_block(s, 0);
			return;
		}
		return;
	case TC_WHOLE:
		c = s->block.len ? memmem(s->block.s, s->block.len, s->tags.close, cl) : NULL;
		if (!c && s->block.len < TC_MAX_BLOCK + cl)
			return;
		if (!c || (size_t)(c - s->block.s) > TC_MAX_BLOCK) {
			used = c ? (size_t)(c - s->block.s) + cl : s->block.len;
			block_as_content(s, used);
		} else {
			body = (size_t)(c - s->block.s);
			used = body + cl;
			if (check_call(s->block.s, body, &call, name)) {
				call_start(s, &call);
				emit(s, TC_CALL_ARGS, call.arguments, call.arguments_len, NULL);
				call_end(s);
			} else {
				block_as_content(s, used);
			}
		}
		leave_block(s, used);
		return;
	case TC_OUT:
		return;
	}
}

static void process(struct tc_stream *s)
{
	size_t ol = strlen(s->tags.open), cl = strlen(s->tags.close);

	while (!s->err) {
		enum tc_phase before = s->phase;
		size_t left = s->block.len;

		if (s->block.oom || s->hold.oom || s->ws.oom) {
			s->err = -ENOMEM;
			return;
		}
		if (s->phase != TC_OUT) {
			in_block(s, cl);
			/* go on while something moved */
			if (s->phase == before && s->block.len == left)
				return;
			continue;
		}
		if (s->hold.len == 0)
			return;
		{
			const char *o = memmem(s->hold.s, s->hold.len, s->tags.open, ol);
			size_t q = o ? (size_t)(o - s->hold.s) :
				s->hold.len - tc_partial_tag(s->hold.s, s->hold.len,
							  s->tags.open);
			size_t w = q;

			while (w > 0 && is_ws(s->hold.s[w - 1]))
				w--;
			if (w > 0) {
				out(s, s->hold.s, w);
				s->seg_nonws = 1;
			}
			if (!o) {
				sb_consume(&s->hold, w);
				return;
			}
			sb_reset(&s->ws);
			sb_add(&s->ws, s->hold.s + w, q - w);
			sb_reset(&s->block);
			sb_add(&s->block, s->hold.s + q + ol, s->hold.len - q - ol);
			sb_reset(&s->hold);
			s->phase = TC_HEAD;
		}
	}
}

/*
 * A forced call (tc_stream_forced) begins: once the reply's first text
 * other than whitespace has come, and it is the open tag's start,
 * call_start() announces it, the whitespace before it going out as for
 * any call. Anything else first
 * (the grammar allows none) leaves the call to be announced as usual.
 */
static void forced_start(struct tc_stream *s)
{
	size_t w = 0, n = s->hold.len, ol = strlen(s->tags.open), k;
	struct tc_call call;

	while (w < n && is_ws(s->hold.s[w]))
		w++;
	if (w == n)
		return;
	k = n - w < ol ? n - w : ol;
	if (memcmp(s->hold.s + w, s->tags.open, k)) {
		s->forced_said = 2;
		return;
	}
	sb_reset(&s->ws);
	sb_add(&s->ws, s->hold.s, w);
	sb_consume(&s->hold, w);
	memset(&call, 0, sizeof(call));
	tc_make_id(call.id);
	call.name = s->forced;
	call_start(s, &call);
	s->forced_said = 1;
}

static void hermes_feed(struct tc_stream *s, const char *text, size_t len)
{
	if (s->phase != TC_OUT)
		sb_add(&s->block, text, len);
	else
		sb_add(&s->hold, text, len);
	if (s->forced && !s->forced_said && !s->n_calls && s->phase == TC_OUT && !s->hold.oom)
		forced_start(s);
	process(s);
}

static void hermes_finish(struct tc_stream *s)
{
	process(s);
	if (s->err)
		return;
	if (s->forced_said == 1) {
		/* announced, and the reply ended before its head did
		 * (max_tokens): the call ends with no arguments; the held
		 * head is not content */
		call_end(s);
		s->forced_said = 2;
		sb_reset(&s->block);
		sb_reset(&s->hold);
		sb_reset(&s->ws);
		s->phase = TC_OUT;
		return;
	}
	switch (s->phase) {
	case TC_HEAD:
	case TC_WHOLE:
		block_as_content(s, s->block.len);
		leave_block(s, s->block.len);
		break;
	case TC_ARGS:		/* cut inside the arguments */
		call_end(s);
		leave_block(s, s->block.len);
		break;
	case TC_TAIL: {
		/* cut inside the call's closing syntax (max_tokens): those bytes
		 * are the call's; anything else after the arguments is text */
		size_t used = 0;
		int partial = tail(s->block.s, s->block.len, s->tags.close, &used) == PARTIAL;

		call_end(s);
		leave_block(s, partial ? s->block.len : 0);
		break;
	}
	case TC_OUT:
		break;
	}
	if (s->n_calls == 0 || s->seg_nonws || !all_ws(s->hold.s, s->hold.len))
		out(s, s->hold.s, s->hold.len);
	sb_reset(&s->hold);
}

/* ---- the stream: a leading think block, then the family's syntax ---- */

static void syntax_feed(struct tc_stream *s, const char *text, size_t len)
{
	if (!len || s->err)
		return;
	if (s->no_calls)
		emit(s, TC_CONTENT, text, len, NULL);
	else if (s->syn == TC_SYN_HERMES)
		hermes_feed(s, text, len);
	else
		tc_tail_feed(s, text, len);
}

/* Reasoning text: TC_REASONING (its newlines next to the tags dropped,
 * as the template strips them), or content as generated. */
static void reason(struct tc_stream *s, const char *p, size_t n)
{
	emit(s, s->reasoning ? TC_REASONING : TC_CONTENT, p, n, NULL);
}

#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"

/*
 * The think block a thinking family opens its reply with: held until it
 * is known whether the reply starts with <think>; inside, everything up to
 * </think> is reasoning (no call is looked for there); after it, the
 * family's syntax. With reasoning split off, the newlines the template
 * strips around it are dropped.
 */
static void think_process(struct tc_stream *s, int final)
{
	struct strbuf *h = &s->think_hold;
	size_t ol = strlen(THINK_OPEN), cl = strlen(THINK_CLOSE);

	if (h->oom) {
		s->err = -ENOMEM;
		return;
	}
	if (s->think_state == 0) {
		if (h->len < ol && (!h->len || !memcmp(h->s, THINK_OPEN, h->len)) && !final)
			return;		/* maybe "<think>": not yet known */
		if (h->len >= ol && !memcmp(h->s, THINK_OPEN, ol)) {
			if (!s->reasoning)
				out(s, THINK_OPEN, ol);
			sb_consume(h, ol);
			s->think_state = 1;
		} else {
			s->think_state = 2;
		}
	}
	if (s->think_state == 1) {
		const char *c = h->len ? memmem(h->s, h->len, THINK_CLOSE, cl) : NULL;
		size_t end = c ? (size_t)(c - h->s) :
			     h->len - (final ? 0 : tc_partial_tag(h->s, h->len, THINK_CLOSE));
		size_t start = 0, stop = end;

		if (!s->reasoning) {
			out(s, h->s, end);
			if (c)
				out(s, THINK_CLOSE, cl);
			sb_consume(h, c ? end + cl : end);
		} else {
			/* strip('\n'): the first newlines, and trailing ones
			 * until it is known nothing else follows them */
			if (!s->think_text)
				while (start < stop && h->s[start] == '\n')
					start++;
			while (stop > start && h->s[stop - 1] == '\n')
				stop--;
			if (stop > start)
				s->think_text = 1;
			reason(s, h->s + start, stop - start);
			sb_consume(h, c ? end + cl : final ? end : stop);
		}
		if (!c && !final)
			return;
		s->think_state = 2;
		if (s->reasoning && c)
			s->think_state = 3;	/* the content's leading newlines */
	}
	if (s->think_state == 3) {
		size_t i = 0;

		while (i < h->len && h->s[i] == '\n')
			i++;
		sb_consume(h, i);
		if (!h->len && !final)
			return;
		s->think_state = 2;
	}
	if (h->len) {
		struct strbuf rest = *h;

		memset(h, 0, sizeof(*h));
		syntax_feed(s, rest.s, rest.len);
		sb_free(&rest);
	}
}

int tc_stream_feed(struct tc_stream *s, const char *text, size_t len)
{
	if (s->err)
		return s->err;
	if (s->think && s->think_state != 2) {
		sb_add(&s->think_hold, text, len);
		think_process(s, 0);
	} else {
		syntax_feed(s, text, len);
	}
	return s->err;
}

int tc_stream_finish(struct tc_stream *s)
{
	if (s->think && s->think_state != 2)
		think_process(s, 1);
	if (s->err || s->no_calls)
		return s->err;
	if (s->syn == TC_SYN_HERMES)
		hermes_finish(s);
	else
		tc_tail_finish(s);
	return s->err;
}

void tc_stream_free(struct tc_stream *s)
{
	sb_free(&s->hold);
	sb_free(&s->ws);
	sb_free(&s->block);
	sb_free(&s->think_hold);
}

/* ---- batch ---- */

struct collect {
	struct strbuf content;
	struct tc_call *calls;
	size_t n_calls;
	struct strbuf name, args;	/* the call being collected */
};

static char *dup_n(const char *p, size_t n)
{
	char *s = malloc(n + 1);

	if (s) {
		memcpy(s, p, n);
		s[n] = '\0';
	}
	return s;
}

static int collect_emit(void *ctx, enum tc_event ev, const char *text,
			size_t len, const struct tc_call *call)
{
	struct collect *c = ctx;
	struct tc_call *calls, *nc;

	switch (ev) {
	case TC_CONTENT:
		sb_add(&c->content, text, len);
		return c->content.oom ? -ENOMEM : 0;
	case TC_CALL_START:
		calls = realloc(c->calls, (c->n_calls + 1) * sizeof(*calls));
		if (!calls)
			return -ENOMEM;
		c->calls = calls;
		memset(&calls[c->n_calls], 0, sizeof(*calls));
		memcpy(calls[c->n_calls].id, call->id, sizeof(call->id));
		sb_reset(&c->name);
		sb_adds(&c->name, call->name);
		sb_reset(&c->args);
		return c->name.oom ? -ENOMEM : 0;
	case TC_CALL_ARGS:
		sb_add(&c->args, text, len);
		return c->args.oom ? -ENOMEM : 0;
	case TC_REASONING:	/* the batch parse keeps it in the content */
		return 0;
	case TC_CALL_END:
		nc = &c->calls[c->n_calls];
		nc->name = dup_n(sb_cstr(&c->name) ? c->name.s : "", c->name.len);
		nc->arguments = dup_n(c->args.len ? c->args.s : "", c->args.len);
		nc->arguments_len = c->args.len;
		if (!nc->name || !nc->arguments) {
			free((void *)nc->name);
			free((void *)nc->arguments);
			return -ENOMEM;
		}
		c->n_calls++;
		return 0;
	}
	return 0;
}

void tc_result_free(struct tc_result *r)
{
	for (size_t i = 0; i < r->n_calls; i++) {
		free((void *)r->calls[i].name);
		free((void *)r->calls[i].arguments);
	}
	free(r->calls);
	free(r->content);
	memset(r, 0, sizeof(*r));
}

int tc_parse(const struct chat_template *t, const char *text, size_t len,
	     struct tc_result *r)
{
	struct collect c = { 0 };
	struct tc_stream s;
	struct strbuf again = { 0 };
	int err;

	memset(r, 0, sizeof(*r));
	tc_stream_init(&s, t, collect_emit, &c);
	err = tc_stream_feed(&s, text, len);
	if (!err)
		err = tc_stream_finish(&s);
	r->calls = c.calls;
	r->n_calls = c.n_calls;
	r->content = sb_steal(&c.content, &r->content_len);
	sb_free(&c.name);
	sb_free(&c.args);
	if (!err && !r->content)
		err = -ENOMEM;
	if (!err) {
		t->f->body(t, r, &again);
		if (again.oom)
			err = -ENOMEM;
		r->canonical = again.len == len &&
			(len == 0 || !memcmp(again.s, text, len));
	}
	sb_free(&again);
	tc_stream_free(&s);
	if (err)
		tc_result_free(r);
	return err;
}
