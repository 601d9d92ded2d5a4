// SPDX-License-Identifier: MIT
/*
 * jconv.c - OpenAI-shaped JSON conversations for the model families'
 * tests (see jconv.h). "reasoning_content" of assistant messages is read
 * as their reasoning; top-level "thinking": false turns thinking off and
 * "now" (Unix seconds) sets the date templates write.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jconv.h"

void jconv_free(struct jconv *j)
{
	for (size_t i = 0; j->msgs && i < j->c.n_msgs; i++)
		free(j->msgs[i].calls);
	free(j->msgs);
	free(j->tools);
	json_decref(j->root);
	memset(j, 0, sizeof(*j));
}

static const char *str_or(json_t *v, const char *dflt)
{
	return json_is_string(v) ? json_string_value(v) : dflt;
}

int jconv_parse(struct jconv *j, const char *text)
{
	json_error_t je;
	json_t *ms, *ts, *m, *t;
	size_t i, k;

	memset(j, 0, sizeof(*j));
	j->root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!j->root) {
		fprintf(stderr, "\njconv: %s\n", je.text);
		return -1;
	}
	ms = json_object_get(j->root, "messages");
	ts = json_object_get(j->root, "tools");
	j->msgs = calloc(json_array_size(ms) + 1, sizeof(*j->msgs));
	j->tools = calloc(json_array_size(ts) + 1, sizeof(*j->tools));
	if (!j->msgs || !j->tools)
		return -1;
	json_array_foreach(ms, i, m) {
		struct chat_msg *cm = &j->msgs[i];
		const char *role = str_or(json_object_get(m, "role"), "");
		json_t *calls = json_object_get(m, "tool_calls"), *c, *content;

		cm->role = !strcmp(role, "system") ? CHAT_SYSTEM : !strcmp(role, "user") ? CHAT_USER :
			   !strcmp(role, "assistant") ? CHAT_ASSISTANT : CHAT_TOOL;
		content = json_object_get(m, "content");
		if (json_is_array(content))	/* one text part */
			content = json_object_get(json_array_get(content, 0), "text");
		cm->content = str_or(content, "");
		cm->content_len = json_is_string(content) ? json_string_length(content) : 0;
		cm->tool_call_id = str_or(json_object_get(m, "tool_call_id"), NULL);
		if (json_is_string(json_object_get(m, "reasoning_content"))) {
			cm->reasoning = json_string_value(json_object_get(m, "reasoning_content"));
			cm->reasoning_len = json_string_length(json_object_get(m, "reasoning_content"));
		}
		if (json_array_size(calls)) {
			cm->calls = calloc(json_array_size(calls), sizeof(*cm->calls));
			if (!cm->calls)
				return -1;
			json_array_foreach(calls, k, c) {
				json_t *fn = json_object_get(c, "function");
				json_t *args = json_object_get(fn, "arguments");

				cm->calls[k].id = str_or(json_object_get(c, "id"), NULL);
				cm->calls[k].name = str_or(json_object_get(fn, "name"), "");
				cm->calls[k].arguments = str_or(args, "{}");
				cm->calls[k].arguments_len = json_is_string(args) ?
							     json_string_length(args) : 2;
			}
			cm->n_calls = json_array_size(calls);
		}
		j->c.n_msgs = i + 1;
	}
	json_array_foreach(ts, i, t) {
		j->tools[i].function = json_object_get(t, "function");
		j->tools[i].name = str_or(json_object_get(j->tools[i].function, "name"), "");
	}
	if (json_is_false(json_object_get(j->root, "thinking")))
		j->c.thinking = CHAT_THINK_OFF;
	if (json_is_integer(json_object_get(j->root, "now")))
		j->c.now = json_integer_value(json_object_get(j->root, "now"));
	j->c.msgs = j->msgs;
	j->c.tools = j->tools;
	j->c.n_tools = json_array_size(ts);
	return 0;
}

/* The prompt for a JSON conversation, malloc'd; NULL when it fails. */
char *render_json(const struct chat_template *t, const char *text)
{
	struct jconv j;
	struct chat_prompt p = { 0 };
	char err[256];
	char *s = NULL;
	int rc;

	if (jconv_parse(&j, text)) {
		jconv_free(&j);
		return NULL;
	}
	rc = chat_render(t, &j.c, &p, err, sizeof(err));
	if (rc)
		fprintf(stderr, "\nrender: %s\n", err);
	else
		s = sb_steal(&p.text, NULL);
	chat_prompt_free(&p);
	jconv_free(&j);
	return s;
}
