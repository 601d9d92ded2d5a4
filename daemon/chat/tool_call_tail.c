// SPDX-License-Identifier: MIT
/*
 * tool_call_tail.c - the tool-call syntaxes whose calls end the reply,
 * for the stream of tool_call.c:
 *
 *   TC_SYN_LLAMA3        the whole reply is one JSON object {"name": N,
 *                        "parameters": A} (or "arguments"; an optional
 *                        "type": "function"), whitespace around it
 *   TC_SYN_MISTRAL_JSON  content, then [TOOL_CALLS][{"name": N,
 *                        "arguments": A, "id": I}, ...]
 *   TC_SYN_MISTRAL_ARGS  content, then [TOOL_CALLS]N[CALL_ID]I[ARGS]A
 *                        (no [CALL_ID] part in the v11 form), repeated
 *
 * Content goes out as it comes (a partial [TOOL_CALLS], or Llama's
 * leading whitespace, held back until it is known what it is). From the
 * trigger on, the text is kept, and each call is announced whole (start,
 * its arguments in one piece, end) when its JSON closes. A call that is
 * not one (bad JSON, an invalid name, arguments that are not an object,
 * over TC_MAX_BLOCK) ends the calls: the text from there on is content,
 * verbatim, and so is a call the reply stopped inside. Arguments are the
 * exact bytes generated for them. A Mistral call keeps the id the model
 * gave it when that is 9 alphanumerics; otherwise a new one is made.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat_internal.h"

#define TOOL_CALLS "[TOOL_CALLS]"
#define PYTHON_TAG "<|python_tag|>"

static int is_ws(char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static size_t skip_ws(const char *s, size_t n, size_t i)
{
	while (i < n && is_ws(s[i]))
		i++;
	return i;
}

/* The end of the JSON value (object or array) opening at s[i], or 0 while
 * it is not closed yet. */
static size_t json_end(const char *s, size_t n, size_t i)
{
	int depth = 0, in_str = 0, esc = 0;

	for (; i < n; i++) {
		char c = s[i];

		if (in_str) {
			if (esc)
				esc = 0;
			else if (c == '\\')
				esc = 1;
			else if (c == '"')
				in_str = 0;
		} else if (c == '"') {
			in_str = 1;
		} else if (c == '{' || c == '[') {
			depth++;
		} else if ((c == '}' || c == ']') && --depth == 0) {
			return i + 1;
		}
	}
	return 0;
}

void tc_make_short_id(char out[10])
{
	char id[TC_ID_LEN + 1];

	tc_make_id(id);
	memcpy(out, id + 5, 9);
	out[9] = '\0';
}

int tc_short_id(const char *id, size_t len)
{
	if (len != 9)
		return 0;
	for (size_t i = 0; i < 9; i++)
		if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
		      (id[i] >= '0' && id[i] <= '9')))
			return 0;
	return 1;
}

static void announce(struct tc_stream *s, const char *name, size_t name_len,
		     const char *id, size_t id_len, const char *args, size_t args_len)
{
	char nm[TC_MAX_NAME + 1];
	struct tc_call call;

	memset(&call, 0, sizeof(call));
	memcpy(nm, name, name_len);
	nm[name_len] = '\0';
	call.name = nm;
	if (s->syn == TC_SYN_LLAMA3)
		tc_make_id(call.id);
	else if (id && tc_short_id(id, id_len))
		memcpy(call.id, id, 9);
	else
		tc_make_short_id(call.id);
	tc_emit(s, TC_CALL_START, NULL, 0, &call);
	tc_emit(s, TC_CALL_ARGS, args, args_len, NULL);
	tc_emit(s, TC_CALL_END, NULL, 0, NULL);
	s->n_calls++;
}

/*
 * One call object (JSON syntaxes): name, its arguments (the key the syntax
 * names, or "arguments"), an optional id and, for Llama, an optional
 * "type": "function"; nothing else. 1 when announced.
 */
static int object_call(struct tc_stream *s, const char *p, size_t n, const char *args_key)
{
	json_t *o = json_loadb(p, n, JSON_REJECT_DUPLICATES, NULL), *name, *args, *id, *type;
	size_t off, len, keys = 0;
	const char *key = args_key;
	int ok = 0;

	if (!json_is_object(o))
		goto out;
	name = json_object_get(o, "name");
	args = json_object_get(o, args_key);
	if (!args) {
		key = "arguments";
		args = json_object_get(o, key);
	}
	id = json_object_get(o, "id");
	type = json_object_get(o, "type");
	keys = 2 + !!id + !!type;
	if (!json_is_string(name) || !tc_valid_name(json_string_value(name), json_string_length(name)) ||
	    !json_is_object(args) || json_object_size(o) != keys ||
	    (id && (s->syn == TC_SYN_LLAMA3 || !json_is_string(id))) ||
	    (type && (s->syn != TC_SYN_LLAMA3 || !json_is_string(type) ||
		      strcmp(json_string_value(type), "function"))) ||
	    tc_find_member(p, n, key, &off, &len))
		goto out;
	announce(s, json_string_value(name), json_string_length(name),
		 id ? json_string_value(id) : NULL, id ? json_string_length(id) : 0, p + off, len);
	ok = 1;
out:
	json_decref(o);
	return ok;
}

/* The calls part from the trigger on has stopped being calls at used:
 * the rest of it is content, and so is all that follows. */
static void give_up(struct tc_stream *s, size_t used)
{
	tc_emit(s, TC_CONTENT, s->block.s + used, s->block.len - used, NULL);
	sb_reset(&s->block);
	s->tail_scan = 0;
	s->tail_final = 1;
}

/* Llama: block is the whole reply (it opens with '{' or the python tag,
 * whitespace aside); tail_scan is 1 once its call was announced, when
 * only whitespace may follow (anything else is content, from there). */
static void calls_llama(struct tc_stream *s, int final)
{
	const char *b = s->block.s;
	size_t n = s->block.len, i = skip_ws(b, n, 0), end;

	if (s->tail_scan) {
		if (i < n || final)
			give_up(s, i);
		else
			sb_reset(&s->block);
		return;
	}
	if (n - i >= strlen(PYTHON_TAG) && !memcmp(b + i, PYTHON_TAG, strlen(PYTHON_TAG)))
		i = skip_ws(b, n, i + strlen(PYTHON_TAG));
	if (i == n && !final)
		return;
	if (i == n || b[i] != '{') {
		give_up(s, 0);
		return;
	}
	end = json_end(b, n, i);
	if (!end) {
		if (final || n > TC_MAX_BLOCK)
			give_up(s, 0);
		return;
	}
	if (!object_call(s, b + i, end - i, "parameters")) {
		give_up(s, 0);
		return;
	}
	sb_consume(&s->block, end);
	s->tail_scan = 1;
	calls_llama(s, final);
}

/* Mistral's JSON array: block is the text from [TOOL_CALLS] on. */
static void calls_json(struct tc_stream *s, int final)
{
	const char *b = s->block.s;
	size_t n = s->block.len, i = s->tail_scan, end;

	if (!i) {			/* the array's "[" */
		i = skip_ws(b, n, strlen(TOOL_CALLS));
		if (i == n) {
			if (final)
				give_up(s, 0);
			return;
		}
		if (b[i] != '[') {
			give_up(s, 0);
			return;
		}
		s->tail_scan = ++i;
	}
	for (;;) {
		i = skip_ws(b, n, s->tail_scan);
		if (i == n)
			break;
		if (b[i] == ']' && s->n_calls) {	/* the end of the calls */
			give_up(s, skip_ws(b, n, i + 1));
			return;
		}
		if (b[i] == ',' && s->n_calls) {
			s->tail_scan = i + 1;
			continue;
		}
		if (b[i] != '{') {
			give_up(s, s->tail_scan);
			return;
		}
		end = json_end(b, n, i);
		if (!end) {
			if (n - i > TC_MAX_BLOCK)
				give_up(s, s->tail_scan);
			break;
		}
		if (!object_call(s, b + i, end - i, "arguments")) {
			give_up(s, s->tail_scan);
			return;
		}
		s->tail_scan = end;
	}
	if (final)
		give_up(s, s->tail_scan);
}

/* Mistral's [TOOL_CALLS]N[CALL_ID]I[ARGS]A: block is the text from the
 * first [TOOL_CALLS] on; tail_scan is where the last call ended (0: none
 * yet). */
static void calls_args(struct tc_stream *s, int final)
{
	const char *b = s->block.s;
	size_t n = s->block.len;

	for (;;) {
		size_t at = s->tail_scan, i = strlen(TOOL_CALLS), name_end, id = 0, id_len = 0;
		size_t args, end;
		const char *mark;

		if (at > 0) {		/* after a call: another, or the end */
			size_t tl = strlen(TOOL_CALLS), k;

			i = skip_ws(b, n, at);
			k = n - i < tl ? n - i : tl;
			if (i == n || (k < tl && !memcmp(b + i, TOOL_CALLS, k))) {
				if (final)
					give_up(s, at);
				return;
			}
			if (k < tl || memcmp(b + i, TOOL_CALLS, tl)) {
				give_up(s, at);
				return;
			}
			i += tl;
		}
		name_end = i;
		while (name_end < n && tc_valid_name(b + name_end, 1) && name_end - i <= TC_MAX_NAME)
			name_end++;
		if (name_end == n) {
			if (final || name_end - i > TC_MAX_NAME)
				give_up(s, at);
			return;
		}
		if (name_end == i || name_end - i > TC_MAX_NAME || b[name_end] != '[') {
			give_up(s, at);
			return;
		}
		mark = b + name_end;
		args = name_end;
		if (n - name_end < 9 && !final && (!memcmp(mark, "[CALL_ID]", n - name_end) ||
						   !memcmp(mark, "[ARGS]", n - name_end < 6 ? n - name_end : 6)))
			return;		/* which mark: not yet known */
		if (n - name_end >= 9 && !memcmp(mark, "[CALL_ID]", 9)) {
			const char *a;

			/* an id is at most 64 bytes: [ARGS] is looked for
			 * that far only, whether the text came in pieces or
			 * whole */
			id = name_end + 9;
			a = memmem(b + id, n - id < 64 + 6 ? n - id : 64 + 6, "[ARGS]", 6);
			if (!a) {
				if (final || n - id >= 64 + 6)
					give_up(s, at);
				return;
			}
			id_len = (size_t)(a - (b + id));
			args = (size_t)(a - b);
		}
		if (n - args < 6) {
			if (final || memcmp(b + args, "[ARGS]", n - args))
				give_up(s, at);
			return;
		}
		if (memcmp(b + args, "[ARGS]", 6)) {
			give_up(s, at);
			return;
		}
		args = skip_ws(b, n, args + 6);
		if (args == n) {
			if (final)
				give_up(s, at);
			return;
		}
		if (b[args] != '{') {
			give_up(s, at);
			return;
		}
		end = json_end(b, n, args);
		if (!end) {
			if (final || n - args > TC_MAX_BLOCK)
				give_up(s, at);
			return;
		}
		{
			json_t *o = json_loadb(b + args, end - args, JSON_REJECT_DUPLICATES, NULL);
			int ok = json_is_object(o);

			json_decref(o);
			if (!ok) {
				give_up(s, at);
				return;
			}
		}
		announce(s, b + i, name_end - i, id ? b + id : NULL, id_len, b + args, end - args);
		s->tail_scan = end;
	}
}

static void calls(struct tc_stream *s, int final)
{
	if (s->block.oom) {
		s->err = -ENOMEM;
		return;
	}
	switch (s->syn) {
	case TC_SYN_LLAMA3:
		calls_llama(s, final);
		break;
	case TC_SYN_MISTRAL_JSON:
		calls_json(s, final);
		break;
	case TC_SYN_MISTRAL_ARGS:
		calls_args(s, final);
		break;
	case TC_SYN_HERMES:
		break;
	}
}

/* Before the calls: content, holding back what may start the trigger. */
static void outside(struct tc_stream *s, int final)
{
	struct strbuf *h = &s->hold;

	if (h->oom) {
		s->err = -ENOMEM;
		return;
	}
	if (s->tail_final) {
		tc_emit(s, TC_CONTENT, h->s, h->len, NULL);
		sb_reset(h);
		return;
	}
	if (s->syn == TC_SYN_LLAMA3) {
		size_t i = skip_ws(h->s, h->len, 0), pl = strlen(PYTHON_TAG);

		if (i == h->len && !final)
			return;		/* leading whitespace: not yet known */
		if (i < h->len && (h->s[i] == '{' ||
				   (h->len - i >= pl ? !memcmp(h->s + i, PYTHON_TAG, pl) :
				    !memcmp(h->s + i, PYTHON_TAG, h->len - i) && !final))) {
			if (h->len - i < pl && h->s[i] != '{')
				return;	/* maybe the python tag */
			sb_add(&s->block, h->s, h->len);
			sb_reset(h);
			s->phase = TC_WHOLE;
			calls(s, final);
			return;
		}
		s->tail_final = 1;	/* content first: no call in this reply */
		tc_emit(s, TC_CONTENT, h->s, h->len, NULL);
		sb_reset(h);
		return;
	}
	{
		size_t tl = strlen(TOOL_CALLS);
		const char *t = h->len ? memmem(h->s, h->len, TOOL_CALLS, tl) : NULL;
		size_t upto = t ? (size_t)(t - h->s) :
			      h->len - (final ? 0 : tc_partial_tag(h->s, h->len, TOOL_CALLS));

		tc_emit(s, TC_CONTENT, h->s, upto, NULL);
		if (!t) {
			sb_consume(h, upto);
			return;
		}
		sb_add(&s->block, t, h->len - upto);
		sb_reset(h);
		s->phase = TC_WHOLE;
		calls(s, final);
	}
}

void tc_tail_feed(struct tc_stream *s, const char *text, size_t len)
{
	if (s->phase == TC_WHOLE) {
		sb_add(&s->block, text, len);
		calls(s, 0);
		if (s->tail_final)
			s->phase = TC_OUT;
		return;
	}
	sb_add(&s->hold, text, len);
	outside(s, 0);
	if (s->tail_final)
		s->phase = TC_OUT;
}

void tc_tail_finish(struct tc_stream *s)
{
	if (s->phase == TC_WHOLE)
		calls(s, 1);
	else
		outside(s, 1);
	if (s->phase == TC_WHOLE && !s->tail_final)
		give_up(s, s->tail_scan);	/* unreachable: calls() settles */
	s->phase = TC_OUT;
}
