// SPDX-License-Identifier: MIT
/*
 * template.c - choosing a model's family: from the operator's setting, or
 * from the markers its GGUF chat template writes (as llama.cpp recognised
 * templates before it embedded a Jinja engine); the template handle, and
 * the calls that dispatch to the family.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_internal.h"

/* In the order auto detection tries them: the most specific first. */
static const struct chat_family *const families[] = {
	&chat_family_qwen3,
	&chat_family_qwen25,
	&chat_family_llama3,
	&chat_family_mistral_v3,
	&chat_family_mistral_v7,
	&chat_family_mistral_v11,
	&chat_family_chatml,
};
#define N_FAMILIES (sizeof(families) / sizeof(families[0]))

const char *chat_families(void)
{
	return "chatml, qwen2.5, qwen3, llama3, mistral-v3, mistral-v7, mistral-v11";
}

static int valid_tag(const char *t)
{
	size_t n = t ? strlen(t) : 0;

	return n > 0 && n <= TC_MAX_TAG;
}

int chat_template_new(const char *tmpl, size_t len, const struct chat_options *o,
		      struct chat_template **out, char *err, size_t errlen)
{
	const char *choice = o && o->choice && o->choice[0] ? o->choice : "auto";
	const char *open = o && o->tool_open ? o->tool_open : TC_DEFAULT_OPEN;
	const char *close = o && o->tool_close ? o->tool_close : TC_DEFAULT_CLOSE;
	const struct chat_family *f = NULL;
	struct chat_template *t;
	char why[160];
	size_t i;

	*out = NULL;
	if (!valid_tag(open) || !valid_tag(close) || !strcmp(open, close)) {
		snprintf(err, errlen, "tool-call tags must differ and be 1 to %d bytes",
			 TC_MAX_TAG);
		return -EINVAL;
	}
	if (!strcmp(choice, "auto")) {
		if (!tmpl || !len) {
			f = &chat_family_chatml;
			snprintf(why, sizeof(why), "the model has no chat template: ChatML");
		}
		for (i = 0; !f && i < N_FAMILIES; i++)
			if (families[i]->detect(tmpl, len)) {
				f = families[i];
				snprintf(why, sizeof(why), "recognised in the model's chat template");
			}
		if (!f) {
			snprintf(err, errlen, "the model's chat template (tokenizer.chat_template, "
				 "%zu bytes) is of no family kvarenad renders (%s); set [model] "
				 "chat_template = chatml to render ChatML anyway", len,
				 chat_families());
			return -EINVAL;
		}
	} else {
		for (i = 0; i < N_FAMILIES; i++)
			if (!strcmp(choice, families[i]->name))
				f = families[i];
		if (!f) {
			snprintf(err, errlen, "unknown chat template '%s' (known: auto, %s)",
				 choice, chat_families());
			return -EINVAL;
		}
		snprintf(why, sizeof(why), "set by [model] chat_template");
	}
	if (f != &chat_family_chatml) {	/* the tags are the template's own */
		open = TC_DEFAULT_OPEN;
		close = TC_DEFAULT_CLOSE;
	}
	t = calloc(1, sizeof(*t) + strlen(open) + strlen(close) + 2);
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	t->f = f;
	t->tags.open = strcpy((char *)(t + 1), open);
	t->tags.close = strcpy((char *)(t + 1) + strlen(open) + 1, close);
	snprintf(t->why, sizeof(t->why), "%s", why);
	if (f->setup && f->setup(t, tmpl, len)) {
		chat_template_free(t);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	*out = t;
	return 0;
}

void chat_template_free(struct chat_template *t)
{
	if (!t)
		return;
	free(t->system.s);
	free(t);
}

const char *chat_template_family(const struct chat_template *t)
{
	return t->f->name;
}

const char *chat_template_why(const struct chat_template *t)
{
	return t->why;
}

const char *chat_template_eot(const struct chat_template *t)
{
	return t->f->eot;
}

enum tc_syntax chat_template_syntax(const struct chat_template *t)
{
	return t->f->syntax;
}

int chat_template_thinks(const struct chat_template *t)
{
	return t->f->think;
}

static const struct chat_call_grammar hermes = { .hermes = 1 };
static const char *const hermes_markers[] = { "<tool_call>", "</tool_call>", "<think>",
					      "</think>", NULL };

void chat_template_grammar(const struct chat_template *t, struct chat_call_grammar *g)
{
	*g = t->f->grammar ? *t->f->grammar : hermes;
	if (g->hermes) {
		g->open = t->tags.open;
		g->close = t->tags.close;
	}
	if (t->f->think) {
		g->skip_open = "<think>";
		g->skip_close = "</think>";
	}
}

const char *const *chat_template_markers(const struct chat_template *t)
{
	return t->f->markers ? t->f->markers : hermes_markers;
}

const char *const *chat_template_eog(const struct chat_template *t)
{
	static const char *const none[] = { NULL };

	return t->f->eog ? t->f->eog : none;
}

int chat_tool_check(const struct chat_tool *t, char *err, size_t errlen)
{
	return chat_parameters_check(t->name, json_object_get(t->function, "parameters"), err,
				     errlen);
}

int chat_parameters_check(const char *name, const json_t *p, char *err, size_t errlen)
{
	const json_t *ty;
	char *got;

	if (!p || json_is_null(p))
		return 0;
	ty = json_is_object(p) ? json_object_get(p, "type") : NULL;
	if (json_is_object(p) && (!ty || (json_is_string(ty) && !strcmp(json_string_value(ty), "object"))))
		return 0;
	got = json_dumps(json_is_object(p) ? ty : p, JSON_ENCODE_ANY | JSON_COMPACT);
	snprintf(err, errlen, "Invalid schema for function '%s': schema must be a JSON Schema of "
		 "'type: \"object\"', got '%s: %s'.", name, json_is_object(p) ? "type" : "schema",
		 got ? got : "?");
	free(got);
	return -EINVAL;
}

int chat_render(const struct chat_template *t, const struct chat_conv *c,
		struct chat_prompt *out, char *err, size_t errlen)
{
	if (errlen)
		err[0] = '\0';
	for (size_t i = 0; i < c->n_tools; i++)
		if (chat_tool_check(&c->tools[i], err, errlen))
			return -EINVAL;
	return t->f->render(t, c, out, err, errlen);
}

int chat_render_tool_round(const struct chat_template *t,
			   const struct chat_tool_result *r, size_t n,
			   struct chat_prompt *out)
{
	return t->f->render_round(t, r, n, out);
}

int chat_count_calls(const struct chat_template *t, const char *text,
		     size_t len, char *name, size_t name_size)
{
	struct tc_result r;
	int n;

	if (name_size)
		name[0] = '\0';
	if (tc_parse(t, text, len, &r))
		return -ENOMEM;
	if (r.n_calls && name_size)
		snprintf(name, name_size, "%s", r.calls[0].name);
	n = (int)r.n_calls;
	tc_result_free(&r);
	return n;
}

int chat_result_msg(const struct tc_result *r, struct chat_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->role = CHAT_ASSISTANT;
	m->content = r->content;
	m->content_len = r->content_len;
	if (!r->n_calls)
		return 0;
	m->calls = calloc(r->n_calls, sizeof(*m->calls));
	if (!m->calls)
		return -ENOMEM;
	for (size_t i = 0; i < r->n_calls; i++)
		m->calls[i] = (struct chat_call){ r->calls[i].id, r->calls[i].name,
						  r->calls[i].arguments, r->calls[i].arguments_len };
	m->n_calls = r->n_calls;
	return 0;
}
