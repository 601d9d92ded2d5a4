// SPDX-License-Identifier: MIT
/*
 * chat_api.c - the POST /v1/chat/completions front end: the body parsed
 * by chat_request.c, the generation run by gen.c, the output written as
 * chat.completion / chat.completion.chunk objects (response.c). With
 * n > 1 every choice is a job of its own; the prompt's full KV blocks are
 * shared between them through the prefix cache (the kernel's block
 * references), so the prompt is prefilled once but for its last partial
 * block (Documentation/api.md).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "api_internal.h"
#include "chat_request.h"
#include "response.h"

struct chat_fe {
	struct resp_ctx rc;
	int include_usage;
};

static struct resp_ctx *rc_of(struct gen *g, const struct gen_choice *c)
{
	struct chat_fe *f = g->fe;

	f->rc.choice = c ? c->index : 0;
	return &f->rc;
}

static void on_start(struct gen *g)
{
	for (unsigned i = 0; i < g->n; i++)
		gen_sse_data(g, resp_chunk_role(rc_of(g, &g->ch[i])));
}

static void on_content(struct gen *g, struct gen_choice *c, const char *text, size_t len,
		       json_t *logprobs)
{
	gen_sse_data(g, gen_obfuscate(g, resp_chunk_content(rc_of(g, c), text, len, logprobs)));
}

static void on_reasoning(struct gen *g, struct gen_choice *c, const char *text, size_t len)
{
	gen_sse_data(g, gen_obfuscate(g, resp_chunk_reasoning(rc_of(g, c), text, len)));
}

static void on_call_start(struct gen *g, struct gen_choice *c, const struct tc_call *call)
{
	gen_sse_data(g, resp_chunk_call(rc_of(g, c), c->n_calls, call));
}

static void on_call_args(struct gen *g, struct gen_choice *c, const char *args, size_t len)
{
	gen_sse_data(g, gen_obfuscate(g, resp_chunk_call_args(rc_of(g, c), c->n_calls, args, len)));
}

static void on_tool_run(struct gen *g, struct gen_choice *c, json_t *run)
{
	json_incref(run);
	gen_sse_data(g, resp_chunk_tool_run(rc_of(g, c), run));
}

static void set_timings(struct gen *g, const struct gen_choice *c)
{
	struct chat_fe *f = g->fe;

	f->rc.has_timings = 1;
	f->rc.ttft_ms = c->ttft_ms;
	f->rc.total_ms = c->total_ms;
	f->rc.usage = c->usage;
}

static void on_choice_done(struct gen *g, struct gen_choice *c)
{
	set_timings(g, c);
	gen_sse_data(g, resp_chunk_finish(rc_of(g, c), gen_finish_reason(c), c->session_id));
}

/* The think blocks' tokens over the choices. */
static uint32_t reasoning_tokens(const struct gen *g)
{
	uint32_t n = 0;

	for (unsigned i = 0; i < g->n; i++)
		n += g->ch[i].reasoning_tokens;
	return n;
}

static void on_done(struct gen *g)
{
	struct chat_fe *f = g->fe;

	if (f->include_usage) {
		f->rc.usage = g->usage;
		f->rc.reasoning_tokens = reasoning_tokens(g);
		gen_sse_data(g, resp_chunk_usage(rc_of(g, NULL), &g->usage,
						 g->ch[0].session_id));
	}
	gen_sse_raw(g, "data: [DONE]\n\n");
}

static void on_error(struct gen *g, const struct api_error *e)
{
	gen_sse_data(g, api_error_json(e));
}

static char *body(struct gen *g)
{
	json_t *choices = json_array(), *ext, *runs = NULL, *sessions = NULL;

	for (unsigned i = 0; choices && i < g->n; i++) {
		struct gen_choice *c = &g->ch[i];
		struct tc_result tr = { 0 };
		json_t *ch;

		tr.content = c->content.s ? c->content.s : "";
		tr.content_len = c->content.len;
		tr.calls = (struct tc_call *)gen_calls(c);
		tr.n_calls = c->n_calls;
		tr.reasoning = c->reasoning.s;
		tr.reasoning_len = c->reasoning.len;
		ch = resp_choice(&tr, i, gen_finish_reason(c), c->logprobs);
		c->logprobs = NULL;
		if (json_array_append_new(choices, ch)) {
			json_decref(choices);
			choices = NULL;
		}
	}
	set_timings(g, &g->ch[0]);
	((struct chat_fe *)g->fe)->rc.reasoning_tokens = reasoning_tokens(g);
	ext = resp_ext(rc_of(g, NULL), g->ch[0].session_id);
	if (g->n > 1) {
		sessions = json_array();
		for (unsigned i = 0; sessions && i < g->n; i++)
			json_array_append_new(sessions, json_string(g->ch[i].session_id));
		if (ext && json_object_set_new(ext, "session_ids", sessions))
			json_decref(ext), ext = NULL;
	}
	runs = g->ch[0].tool_runs;
	if (ext && runs && json_object_set(ext, "tool_runs", runs))
		json_decref(ext), ext = NULL;
	return resp_completion_choices(rc_of(g, NULL), choices, &g->usage, ext);
}

static void fe_free(struct gen *g)
{
	free(g->fe);
	g->fe = NULL;
}

static const struct gen_ops chat_ops = {
	.start = on_start,
	.content = on_content,
	.reasoning = on_reasoning,
	.call_start = on_call_start,
	.call_args = on_call_args,
	.tool_run = on_tool_run,
	.choice_done = on_choice_done,
	.done = on_done,
	.error = on_error,
	.body = body,
	.free = fe_free,
};

enum MHD_Result chat_api_handle(struct req *q)
{
	struct kvd_api *a = q->a;
	struct api_error e;
	struct chat_fe *f;
	struct gen *g;

	g = api_gen_new(q, &chat_ops, "chatcmpl-");
	f = g ? calloc(1, sizeof(*f)) : NULL;
	if (!f)
		return api_fail(q, 500, "server_error", NULL, "out of memory");
	g->fe = f;
	if (chat_request_parse(q->body.s ? q->body.s : "", q->body.len,
			       kvd_model_id(a->d), &g->cr, &e))
		return api_send_error(q, &e);
	g->stream = g->cr.stream;
	f->include_usage = g->cr.include_usage;
	f->rc.id = g->id;
	f->rc.model = g->model;
	f->rc.created = g->created;
	f->rc.usage_null = g->cr.stream && g->cr.include_usage;
	f->rc.fingerprint = g->fingerprint;
	if (gen_submit(g, q->tenant_id, g->cr.n, &e))
		return api_send_error(q, &e);
	if (g->stream)
		return api_stream(q, g);
	return api_wait(q, g);
}
