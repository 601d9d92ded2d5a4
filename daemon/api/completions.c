// SPDX-License-Identifier: MIT
/*
 * completions.c - POST /v1/completions, OpenAI's legacy text completion:
 * the prompt is the model's input as is (no chat template), the reply
 * its continuation. echo, logprobs (the top alternatives per token),
 * stop, n, stream and the sampling parameters of chat completions;
 * suffix (fill-in-the-middle) and best_of are refused, as are prompts
 * given as token ids or several prompts in one request. The generation
 * is gen.c's, as for every front end.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "chat_request.h"
#include "response.h"

#define DEFAULT_MAX_TOKENS 16	/* OpenAI's default for this endpoint */

struct cmpl_fe {
	int echo;
	int include_usage;
	int n_top;			/* logprobs: alternatives per token */
	size_t prompt_len;		/* echo: text offsets start after it */
};

/* {"tokens", "token_logprobs", "top_logprobs", "text_offset"} from the
 * chat-style per-token array resp_logprob() builds. */
static json_t *legacy_logprobs(json_t *lp, size_t offset)
{
	json_t *toks = json_array(), *lps = json_array(), *tops = json_array();
	json_t *offs = json_array(), *t;
	size_t i;

	json_array_foreach(lp, i, t) {
		json_t *top = json_object(), *alt;
		size_t k;

		json_array_append(toks, json_object_get(t, "token"));
		json_array_append(lps, json_object_get(t, "logprob"));
		json_array_foreach(json_object_get(t, "top_logprobs"), k, alt)
			json_object_set(top, json_string_value(json_object_get(alt, "token")),
					json_object_get(alt, "logprob"));
		json_array_append_new(tops, top);
		json_array_append_new(offs, json_integer((json_int_t)offset));
		offset += strlen(json_string_value(json_object_get(t, "token")));
	}
	return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps,
			 "top_logprobs", tops, "text_offset", offs);
}

static json_t *base(struct gen *g)
{
	return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", g->id, "object", "text_completion",
			 "created", (json_int_t)g->created, "model", g->model,
			 "system_fingerprint", g->fingerprint);
}

static char *chunk(struct gen *g, unsigned index, const char *text, size_t len,
		   json_t *lp, const char *finish)
{
	json_t *o = base(g);
	char *s = NULL;

	if (o && !json_object_set_new(o, "choices", json_pack("[{s:o, s:i, s:o, s:o}]",
			"text", api_json_string_lossy(text, len), "index", (int)index,
			"logprobs", lp ? lp : json_null(),
			"finish_reason", finish ? json_string(finish) : json_null())))
		s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return s;
}

static void on_start(struct gen *g)
{
	struct cmpl_fe *f = g->fe;

	if (f->echo)
		for (unsigned i = 0; i < g->n; i++)
			gen_sse_data(g, chunk(g, i, g->prompt.text.s, g->prompt.text.len, NULL, NULL));
}

static void on_content(struct gen *g, struct gen_choice *c, const char *text, size_t len,
		       json_t *logprobs)
{
	struct cmpl_fe *f = g->fe;
	json_t *lp = NULL;

	if (logprobs) {
		/* offsets count from the start of this choice's text */
		lp = legacy_logprobs(logprobs, (f->echo ? f->prompt_len : 0) +
				     c->content.len - len);
		json_decref(logprobs);
	}
	gen_sse_data(g, gen_obfuscate(g, chunk(g, c->index, text, len, lp, NULL)));
}

static void on_choice_done(struct gen *g, struct gen_choice *c)
{
	gen_sse_data(g, chunk(g, c->index, "", 0, NULL, gen_finish_reason(c)));
}

static json_t *usage_json(const struct kvd_usage *u)
{
	return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens,
			 "completion_tokens", (json_int_t)u->completion_tokens,
			 "total_tokens", (json_int_t)u->prompt_tokens + u->completion_tokens,
			 "prompt_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens);
}

static void on_done(struct gen *g)
{
	struct cmpl_fe *f = g->fe;

	if (f->include_usage) {
		json_t *o = base(g);
		char *s = NULL;

		if (o && !json_object_set_new(o, "choices", json_array()) &&
		    !json_object_set_new(o, "usage", usage_json(&g->usage)))
			s = json_dumps(o, JSON_COMPACT);
		json_decref(o);
		gen_sse_data(g, s);
	}
	gen_sse_raw(g, "data: [DONE]\n\n");
}

static void on_error(struct gen *g, const struct api_error *e)
{
	gen_sse_data(g, api_error_json(e));
}

static char *body(struct gen *g)
{
	struct cmpl_fe *f = g->fe;
	json_t *o = base(g), *choices = json_array(), *ext;
	struct resp_ctx rc = { .has_timings = 1, .ttft_ms = g->ttft_ms, .total_ms = g->total_ms,
			       .usage = g->ch[0].usage };
	char *s = NULL;

	for (unsigned i = 0; choices && i < g->n; i++) {
		struct gen_choice *c = &g->ch[i];
		struct strbuf t = { 0 };
		json_t *lp = c->logprobs ? legacy_logprobs(c->logprobs, f->echo ? f->prompt_len : 0) :
			     json_null();

		if (f->echo)
			sb_add(&t, g->prompt.text.s, g->prompt.text.len);
		sb_add(&t, c->content.s ? c->content.s : "", c->content.len);
		if (t.oom || json_array_append_new(choices, json_pack("{s:o, s:i, s:o, s:s}",
				"text", api_json_string_lossy(t.s ? t.s : "", t.len), "index", (int)i,
				"logprobs", lp, "finish_reason", gen_finish_reason(c)))) {
			json_decref(choices);
			choices = NULL;
		}
		sb_free(&t);
	}
	ext = resp_ext(&rc, g->ch[0].session_id);
	if (o && choices && ext && !json_object_set_new(o, "choices", choices) &&
	    !json_object_set_new(o, "usage", usage_json(&g->usage)) &&
	    !json_object_set_new(o, "kvarena", ext))
		s = json_dumps(o, JSON_COMPACT);
	else if (!o || !choices || !ext) {
		json_decref(choices);
		json_decref(ext);
	}
	json_decref(o);
	return s;
}

static void fe_free(struct gen *g)
{
	free(g->fe);
	g->fe = NULL;
}

static const struct gen_ops cmpl_ops = {
	.start = on_start,
	.content = on_content,
	.choice_done = on_choice_done,
	.done = on_done,
	.error = on_error,
	.body = body,
	.free = fe_free,
};

static const char *const known_keys[] = {
	"model", "prompt", "suffix", "max_tokens", "temperature", "top_p", "n",
	"stream", "stream_options", "logprobs", "echo", "stop", "presence_penalty",
	"frequency_penalty", "best_of", "logit_bias", "user", "seed",
	"top_k", "min_p", "repetition_penalty", "repeat_penalty", "ignore_eos", "kvarena",
};

static int parse(struct gen *g, struct cmpl_fe *f, const struct req *q, struct api_error *e)
{
	struct chat_request *r = &g->cr;
	json_t *root, *v, *so;
	json_int_t mt = DEFAULT_MAX_TOKENS, n = 1, lp = 0, best = 1;
	int has, has_lp;
	double d;

	if (chat_request_begin(q->body.s ? q->body.s : "", q->body.len, kvd_model_id(q->a->d),
			       known_keys, sizeof(known_keys) / sizeof(known_keys[0]), r, e))
		return -1;
	root = r->root;
	v = json_object_get(root, "prompt");
	if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
		v = json_array_get(v, 0);
	if (!v)
		return api_bad(e, "prompt", "Missing required parameter: 'prompt'."), -1;
	if (json_is_array(v))
		return api_error_set(e, 400, API_INVALID, "unsupported_value", "prompt",
				     "Invalid 'prompt': one text prompt per request here (several prompts, or prompts as token ids, are not supported)."), -1;
	if (!json_is_string(v) || !json_string_length(v))
		return api_bad(e, "prompt", "Invalid 'prompt': a non-empty string."), -1;
	sb_add(&g->prompt.text, json_string_value(v), json_string_length(v));
	if (g->prompt.text.oom)
		return api_error_set(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
	f->prompt_len = json_string_length(v);
	g->raw_prompt = 1;
	v = json_object_get(root, "suffix");
	if (v && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v)))
		return api_error_set(e, 400, API_INVALID, "unsupported_parameter", "suffix",
				     "Unsupported parameter: 'suffix' (fill-in-the-middle) is not supported by this server."), -1;
	if (param_int(e, root, "best_of", 1, 1, &best, &has)) {
		api_error_set(e, 400, API_INVALID, "unsupported_value", "best_of",
			      "Invalid 'best_of': only 1 (the default) is supported; use n for several choices.");
		return -1;
	}
	if (param_int(e, root, "max_tokens", 1, UINT32_MAX, &mt, &has) ||
	    param_int(e, root, "n", 1, CHAT_MAX_CHOICES, &n, &has) ||
	    param_int(e, root, "logprobs", 0, KVD_MAX_TOP_LOGPROBS, &lp, &has_lp) ||
	    param_bool(e, root, "echo", &f->echo) || param_bool(e, root, "stream", &g->stream))
		return -1;
	r->s.max_tokens = (uint32_t)mt;
	r->n = (unsigned)n;
	if (has_lp) {
		r->s.logprobs = 1;
		r->s.top_logprobs = (uint32_t)lp;
		f->n_top = (int)lp;
	}
	if (has_lp && f->echo)
		return api_error_set(e, 400, API_INVALID, "unsupported_value", "echo",
				     "'echo' with 'logprobs' would need the prompt's log-probabilities, which this server does not compute."), -1;
	d = 1;
	if (param_number(e, root, "temperature", 0, 2, &d))
		return -1;
	r->s.temperature = (float)d;
	d = 1;
	if (param_number(e, root, "top_p", 0, 1, &d))
		return -1;
	r->s.top_p = (float)d;
	d = 0;
	if (param_number(e, root, "frequency_penalty", -2, 2, &d))
		return -1;
	r->s.frequency_penalty = (float)d;
	d = 0;
	if (param_number(e, root, "presence_penalty", -2, 2, &d))
		return -1;
	r->s.presence_penalty = (float)d;
	{
		json_int_t seed = 0;
		int has_seed;

		if (param_int(e, root, "seed", INT64_MIN, INT64_MAX, &seed, &has_seed))
			return -1;
		r->s.seed = (uint64_t)seed;
		r->s.has_seed = has_seed;
	}
	/* kvarena.close_in_budget steers structured decoding, which a
	 * text completion never has: it could only be ignored here */
	v = json_object_get(root, "kvarena");
	if (v && !json_is_null(v))
		return api_error_set(e, 400, API_INVALID, "unsupported_parameter", "kvarena",
				     "Unsupported parameter: 'kvarena' (close_in_budget steers structured decoding, which /v1/completions does not do)."), -1;
	if (param_stop(e, json_object_get(root, "stop"), "stop", &r->s) ||
	    param_extra_sampling(r, root, e) ||
	    param_string(e, root, "user", "user", CHAT_MAX_ID, &r->user))
		return -1;
	(void)so;
	return param_stream_options(r, root, g->stream, &f->include_usage, e);
}

enum MHD_Result completions_handle(struct req *q)
{
	struct api_error e;
	struct cmpl_fe *f;
	struct gen *g;

	g = api_gen_new(q, &cmpl_ops, "cmpl-");
	f = g ? calloc(1, sizeof(*f)) : NULL;
	if (!f)
		return api_fail(q, 500, "server_error", NULL, "out of memory");
	g->fe = f;
	if (parse(g, f, q, &e) || gen_submit(g, q->tenant_id, g->cr.n, &e))
		return api_send_error(q, &e);
	if (g->stream)
		return api_stream(q, g);
	return api_wait(q, g);
}
