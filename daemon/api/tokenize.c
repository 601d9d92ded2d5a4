// SPDX-License-Identifier: MIT
/*
 * tokenize.c - POST /tokenize and POST /detokenize as llama.cpp's server
 * has them, for tools that count tokens or build prompts by id:
 *
 *   /tokenize   {"content": TEXT, "add_special": false, "parse_special": true,
 *                "with_pieces": false}
 *            -> {"tokens": [ID, ...]}  or, with_pieces,
 *               {"tokens": [{"id": ID, "piece": TEXT or [BYTES]}, ...]}
 *   /detokenize {"tokens": [ID, ...]} -> {"content": TEXT}
 *
 * The model's tokenizer is the orchestrator's (kvd_tokenize): the same
 * ids a prompt gets. Knows nothing about HTTP.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"
#include "tokenize.h"

#define PIECE_MAX 256		/* bytes of one token's text */

static json_t *load(const char *body, size_t len, struct api_error *e)
{
	json_error_t je;
	json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);

	if (!o) {
		api_bad(e, NULL, "We could not parse the JSON body of your request: %s (line %d, column %d).",
			je.text, je.line, je.column);
		return NULL;
	}
	if (!json_is_object(o)) {
		json_decref(o);
		api_bad(e, NULL, "The request body must be a JSON object.");
		return NULL;
	}
	return o;
}

static int only_keys(json_t *o, const char *const *keys, size_t n, struct api_error *e)
{
	const char *k;
	json_t *v;

	json_object_foreach(o, k, v) {
		size_t i;

		for (i = 0; i < n && strcmp(k, keys[i]); i++)
			;
		if (i == n) {
			api_error_set(e, 400, API_INVALID, "unknown_parameter", k,
				      "Unrecognized request argument supplied: %s", k);
			return -1;
		}
	}
	return 0;
}

static int get_flag(json_t *o, const char *key, int def, int *out, struct api_error *e)
{
	json_t *v = json_object_get(o, key);

	*out = def;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v)) {
		api_bad(e, key, "Invalid type for '%s': expected a boolean.", key);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

/* A piece as a string when it is valid UTF-8 on its own, else its bytes
 * (llama.cpp's server does the same). */
static json_t *piece_json(const char *p, size_t n)
{
	json_t *s = json_stringn(p, n), *a;

	if (s)
		return s;
	a = json_array();
	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_integer((unsigned char)p[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

char *api_tokenize(struct kvd *d, const char *body, size_t len, struct api_error *e)
{
	static const char *const keys[] = { "content", "add_special", "parse_special",
					    "with_pieces", "model" };
	json_t *o = load(body, len, e), *c, *toks = NULL, *out = NULL;
	int add_special, parse_special, pieces, n;
	int32_t *ids = NULL;
	char *res = NULL;

	if (!o)
		return NULL;
	if (only_keys(o, keys, sizeof(keys) / sizeof(keys[0]), e) ||
	    get_flag(o, "add_special", 0, &add_special, e) ||
	    get_flag(o, "parse_special", 1, &parse_special, e) ||
	    get_flag(o, "with_pieces", 0, &pieces, e))
		goto out;
	if (!parse_special) {
		api_error_set(e, 400, API_INVALID, "unsupported_value", "parse_special",
			      "'parse_special': false is not supported: special-token text always becomes its token here, as in a rendered prompt.");
		goto out;
	}
	c = json_object_get(o, "content");
	if (!json_is_string(c)) {
		api_bad(e, "content", c ? "Invalid type for 'content': expected a string." :
			"Missing required parameter: 'content'.");
		goto out;
	}
	n = kvd_tokenize(d, json_string_value(c), json_string_length(c), add_special, NULL, 0);
	if (n >= 0) {
		ids = malloc(((size_t)n + 1) * sizeof(*ids));
		if (!ids)
			n = -ENOMEM;
		else
			n = kvd_tokenize(d, json_string_value(c), json_string_length(c),
					 add_special, ids, (size_t)n);
	}
	if (n < 0) {
		if (n == -ENOMEM)
			api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
		else
			api_bad(e, "content", "The text cannot be tokenized (%s).", strerror(-n));
		goto out;
	}
	toks = json_array();
	for (int i = 0; toks && i < n; i++) {
		json_t *t;

		if (pieces) {
			char buf[PIECE_MAX];
			int b = kvd_token_piece(d, ids[i], buf, sizeof(buf));

			t = json_pack("{s:i, s:o}", "id", (int)ids[i], "piece",
				      piece_json(buf, b < 0 ? 0 : b > PIECE_MAX ? PIECE_MAX : (size_t)b));
		} else {
			t = json_integer(ids[i]);
		}
		if (json_array_append_new(toks, t)) {
			json_decref(toks);
			toks = NULL;
		}
	}
	out = toks ? json_pack("{s:o}", "tokens", toks) : NULL;
	res = out ? json_dumps(out, JSON_COMPACT) : NULL;
	if (!res)
		api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
out:
	json_decref(out);
	json_decref(o);
	free(ids);
	return res;
}

char *api_detokenize(struct kvd *d, const char *body, size_t len, struct api_error *e)
{
	static const char *const keys[] = { "tokens", "model" };
	json_t *o = load(body, len, e), *t, *v, *out;
	struct strbuf b = { 0 };
	char *res = NULL;
	size_t i;

	if (!o)
		return NULL;
	if (only_keys(o, keys, sizeof(keys) / sizeof(keys[0]), e))
		goto out;
	t = json_object_get(o, "tokens");
	if (!json_is_array(t)) {
		api_bad(e, "tokens", t ? "Invalid type for 'tokens': expected an array of token ids." :
			"Missing required parameter: 'tokens'.");
		goto out;
	}
	json_array_foreach(t, i, v) {
		char buf[PIECE_MAX];
		json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
		int n = id >= 0 && id <= INT32_MAX ? kvd_token_piece(d, (int32_t)id, buf, sizeof(buf)) :
			-EINVAL;

		if (n < 0) {
			api_bad(e, "tokens", "Invalid 'tokens[%zu]': not a token id of this model (0..%u).",
				i, kvd_vocab_size(d) - 1);
			goto out;
		}
		sb_add(&b, buf, n > PIECE_MAX ? PIECE_MAX : (size_t)n);
	}
	if (b.oom) {
		api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
		goto out;
	}
	/* a cut through a multi-byte character shows as U+FFFD */
	out = json_pack("{s:o}", "content", api_json_string_lossy(b.s ? b.s : "", b.len));
	res = out ? json_dumps(out, JSON_COMPACT) : NULL;
	json_decref(out);
	if (!res)
		api_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
out:
	sb_free(&b);
	json_decref(o);
	return res;
}
