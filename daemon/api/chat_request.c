// SPDX-License-Identifier: MIT
/*
 * chat_request.c - parsing and validating a chat-completions body with
 * jansson: every field's type, range and size, errors naming the field
 * (param) as OpenAI does. Does not render the prompt (daemon/chat) and
 * does not know the orchestrator beyond the served model's id.
 *
 * Unknown fields: the body's top level is checked against OpenAI's list of
 * chat-completions parameters (plus the sampling parameters vLLM and
 * llama.cpp's server add: top_k, min_p, repetition_penalty, ignore_eos);
 * a name not on it is refused ("Unrecognized request argument supplied"),
 * as OpenAI does, so a typo such as "max_token" is not silently ignored.
 * A parameter on the list is honoured, or, with the values we cannot
 * serve (store: true, a reasoning effort, another verbosity or service
 * tier, audio, prediction, ...), refused with a 400 naming it: never
 * accepted and ignored. Inside messages and tools, unknown keys are
 * ignored: clients echo response messages back with extra fields.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_request.h"

struct parser {
	struct chat_request *r;
	struct api_error *e;
};

const char *param_type_name(const json_t *v)
{
	if (!v)		/* a key that is not there */
		return "nothing";
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	default: return "null";
	}
}

int param_wrong_type(struct api_error *e, const char *param, const json_t *v,
		      const char *want)
{
	if (!v)
		api_bad(e, param, "Missing required parameter: '%s' (expected %s).", param, want);
	else
		api_bad(e, param, "Invalid type for '%s': expected %s, but got %s.",
			param, want, param_type_name(v));
	return -1;
}

/* Whether o has key with a value other than null (null is absent). */
static int param_given(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return v && !json_is_null(v);
}

/* Optional number within [lo, hi]; *out untouched when absent/null. */
int param_number(struct api_error *e, json_t *o, const char *key,
		      double lo, double hi, double *out)
{
	json_t *v = json_object_get(o, key);
	double d;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return param_wrong_type(e, key, v, "a number");
	d = json_number_value(v);
	if (!isfinite(d) || d < lo || d > hi) {
		api_bad(e, key, "Invalid value for '%s': %g is not within [%g, %g].",
			key, d, lo, hi);
		return -1;
	}
	*out = d;
	return 0;
}

int param_int(struct api_error *e, json_t *o, const char *key,
		   json_int_t lo, json_int_t hi, json_int_t *out, int *present)
{
	json_t *v = json_object_get(o, key);

	*present = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v))
		return param_wrong_type(e, key, v, "an integer");
	if (json_integer_value(v) < lo || json_integer_value(v) > hi) {
		api_bad(e, key, "Invalid value for '%s': %lld is not within [%lld, %lld].",
			key, (long long)json_integer_value(v), (long long)lo,
			(long long)hi);
		return -1;
	}
	*out = json_integer_value(v);
	*present = 1;
	return 0;
}

int param_bool(struct api_error *e, json_t *o, const char *key, int *out)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return param_wrong_type(e, key, v, "a boolean");
	*out = json_is_true(v);
	return 0;
}

/* Optional string of at most max bytes; NULL when absent/null. */
int param_string(struct api_error *e, json_t *o, const char *key,
		      const char *param, size_t max, const char **out)
{
	json_t *v = json_object_get(o, key);

	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return param_wrong_type(e, param, v, "a string");
	if (json_string_length(v) > max) {
		api_bad(e, param, "Invalid '%s': string too long (%zu bytes; at most %zu).",
			param, json_string_length(v), max);
		return -1;
	}
	*out = json_string_value(v);
	return 0;
}

/* ---- messages ---- */

/* A string, or an array of {"type": "text", "text": ...} parts joined. */
static int get_content(struct parser *p, json_t *m, const char *param,
		       int required, const char **out, size_t *len)
{
	json_t *v = json_object_get(m, "content"), *part, *joined;
	char pp[160];
	size_t i;
	struct strbuf b = { 0 };

	*out = "";
	*len = 0;
	if (!v || json_is_null(v)) {
		if (!required)
			return 0;
		api_bad(p->e, param, "Missing required parameter: '%s'.", param);
		return -1;
	}
	if (json_is_string(v)) {
		*out = json_string_value(v);
		*len = json_string_length(v);
		return 0;
	}
	if (!json_is_array(v))
		return param_wrong_type(p->e, param, v, "a string or an array of content parts");
	if (json_array_size(v) > CHAT_MAX_PARTS) {
		api_bad(p->e, param, "Invalid '%s': at most %d content parts.",
			param, CHAT_MAX_PARTS);
		return -1;
	}
	json_array_foreach(v, i, part) {
		json_t *type = json_object_get(part, "type");
		json_t *text = json_object_get(part, "text");

		snprintf(pp, sizeof(pp), "%s[%zu]", param, i);
		if (!json_is_object(part)) {
			sb_free(&b);
			return param_wrong_type(p->e, pp, part, "an object");
		}
		snprintf(pp, sizeof(pp), "%s[%zu].type", param, i);
		if (!json_is_string(type)) {
			sb_free(&b);
			return type ? param_wrong_type(p->e, pp, type, "a string") :
				(api_bad(p->e, pp, "Missing required parameter: '%s'.", pp), -1);
		}
		if (strcmp(json_string_value(type), "text")) {
			api_bad(p->e, pp, "Invalid value for '%s': content parts of type '%s' are not supported; this server takes text only.",
				pp, json_string_value(type));
			sb_free(&b);
			return -1;
		}
		snprintf(pp, sizeof(pp), "%s[%zu].text", param, i);
		if (!json_is_string(text)) {
			sb_free(&b);
			return text ? param_wrong_type(p->e, pp, text, "a string") :
				(api_bad(p->e, pp, "Missing required parameter: '%s'.", pp), -1);
		}
		sb_add(&b, json_string_value(text), json_string_length(text));
	}
	joined = json_stringn(b.len ? b.s : "", b.len);
	sb_free(&b);
	if (!joined || json_array_append_new(p->r->keep, joined)) {
		api_error_set(p->e, 500, "server_error", NULL, NULL, "out of memory");
		return -1;
	}
	*out = json_string_value(joined);
	*len = json_string_length(joined);
	return 0;
}

static int parse_calls(struct parser *p, json_t *m, size_t mi,
		       struct chat_msg *msg)
{
	json_t *v = json_object_get(m, "tool_calls"), *c;
	char pp[160];
	size_t i;

	if (!v || json_is_null(v))
		return 0;
	snprintf(pp, sizeof(pp), "messages[%zu].tool_calls", mi);
	if (!json_is_array(v))
		return param_wrong_type(p->e, pp, v, "an array");
	if (json_array_size(v) > CHAT_MAX_CALLS) {
		api_bad(p->e, pp, "Invalid '%s': at most %d tool calls.", pp, CHAT_MAX_CALLS);
		return -1;
	}
	if (json_array_size(v) == 0)
		return 0;
	msg->calls = calloc(json_array_size(v), sizeof(*msg->calls));
	if (!msg->calls) {
		api_error_set(p->e, 500, "server_error", NULL, NULL, "out of memory");
		return -1;
	}
	json_array_foreach(v, i, c) {
		struct chat_call *cc = &msg->calls[i];
		json_t *type, *fn, *args;

		msg->n_calls = i + 1;
		snprintf(pp, sizeof(pp), "messages[%zu].tool_calls[%zu]", mi, i);
		if (!json_is_object(c))
			return param_wrong_type(p->e, pp, c, "an object");
		snprintf(pp, sizeof(pp), "messages[%zu].tool_calls[%zu].id", mi, i);
		if (param_string(p->e, c, "id", pp, CHAT_MAX_ID, &cc->id))
			return -1;
		if (!cc->id || !cc->id[0]) {
			api_bad(p->e, pp, "Missing required parameter: '%s'.", pp);
			return -1;
		}
		type = json_object_get(c, "type");
		snprintf(pp, sizeof(pp), "messages[%zu].tool_calls[%zu].type", mi, i);
		if (type && !json_is_null(type) &&
		    (!json_is_string(type) || strcmp(json_string_value(type), "function"))) {
			api_bad(p->e, pp, "Invalid value for '%s': only 'function' tool calls are supported.", pp);
			return -1;
		}
		fn = json_object_get(c, "function");
		snprintf(pp, sizeof(pp), "messages[%zu].tool_calls[%zu].function", mi, i);
		if (!json_is_object(fn)) {
			if (!fn)
				return api_bad(p->e, pp, "Missing required parameter: '%s'.", pp), -1;
			return param_wrong_type(p->e, pp, fn, "an object");
		}
		snprintf(pp, sizeof(pp), "messages[%zu].tool_calls[%zu].function.name", mi, i);
		if (param_string(p->e, fn, "name", pp, TC_MAX_NAME, &cc->name))
			return -1;
		if (!cc->name || !tc_valid_name(cc->name, strlen(cc->name))) {
			api_bad(p->e, pp, "Invalid '%s': a function name is 1 to 64 of a-z, A-Z, 0-9, '_' and '-'.", pp);
			return -1;
		}
		args = json_object_get(fn, "arguments");
		snprintf(pp, sizeof(pp), "messages[%zu].tool_calls[%zu].function.arguments", mi, i);
		if (!json_is_string(args)) {
			if (!args)
				return api_bad(p->e, pp, "Missing required parameter: '%s'.", pp), -1;
			return param_wrong_type(p->e, pp, args, "a string");
		}
		cc->arguments = json_string_value(args);
		cc->arguments_len = json_string_length(args);
	}
	return 0;
}

/* A tool message answers a call of the assistant message it follows
 * (other tool messages may come between). */
static int check_tool_reply(struct parser *p, size_t mi, const char *id)
{
	char pp[96];

	snprintf(pp, sizeof(pp), "messages[%zu].tool_call_id", mi);
	for (size_t j = mi; j-- > 0;) {
		const struct chat_msg *m = &p->r->msgs[j];

		if (m->role == CHAT_TOOL)
			continue;
		if (m->role == CHAT_ASSISTANT)
			for (size_t k = 0; k < m->n_calls; k++)
				if (!strcmp(m->calls[k].id, id))
					return 0;
		break;
	}
	api_bad(p->e, pp, "Invalid '%s': messages with role 'tool' must answer a tool call ('%s') of the assistant message before them.",
		pp, id);
	return -1;
}

static int parse_messages(struct parser *p, json_t *v)
{
	json_t *m;
	size_t i;
	char pp[96];

	if (!v)
		return api_bad(p->e, "messages", "Missing required parameter: 'messages'."), -1;
	if (!json_is_array(v))
		return param_wrong_type(p->e, "messages", v, "an array");
	if (json_array_size(v) == 0)
		return api_bad(p->e, "messages", "Invalid 'messages': empty array. Expected an array with minimum length 1."), -1;
	if (json_array_size(v) > CHAT_MAX_MESSAGES)
		return api_bad(p->e, "messages", "Invalid 'messages': at most %d messages.",
			       CHAT_MAX_MESSAGES), -1;
	p->r->msgs = calloc(json_array_size(v), sizeof(*p->r->msgs));
	if (!p->r->msgs)
		return api_error_set(p->e, 500, "server_error", NULL, NULL, "out of memory"), -1;
	json_array_foreach(v, i, m) {
		struct chat_msg *msg = &p->r->msgs[i];
		const char *role, *name;

		p->r->n_msgs = i + 1;
		snprintf(pp, sizeof(pp), "messages[%zu]", i);
		if (!json_is_object(m))
			return param_wrong_type(p->e, pp, m, "an object");
		snprintf(pp, sizeof(pp), "messages[%zu].role", i);
		if (param_string(p->e, m, "role", pp, 64, &role))
			return -1;
		if (!role)
			return api_bad(p->e, pp, "Missing required parameter: '%s'.", pp), -1;
		snprintf(pp, sizeof(pp), "messages[%zu].name", i);
		if (param_string(p->e, m, "name", pp, CHAT_MAX_ID, &name))
			return -1;
		snprintf(pp, sizeof(pp), "messages[%zu].content", i);
		if (!strcmp(role, "system") || !strcmp(role, "developer")) {
			msg->role = CHAT_SYSTEM;
			if (get_content(p, m, pp, 1, &msg->content, &msg->content_len))
				return -1;
		} else if (!strcmp(role, "user")) {
			msg->role = CHAT_USER;
			if (get_content(p, m, pp, 1, &msg->content, &msg->content_len))
				return -1;
		} else if (!strcmp(role, "assistant")) {
			json_t *rc = json_object_get(m, "reasoning_content");

			msg->role = CHAT_ASSISTANT;
			if (get_content(p, m, pp, 0, &msg->content, &msg->content_len) ||
			    parse_calls(p, m, i, msg))
				return -1;
			/* its reasoning, as llama.cpp's and vLLM's servers name
			 * it (a family that thinks writes it back) */
			snprintf(pp, sizeof(pp), "messages[%zu].reasoning_content", i);
			if (rc && !json_is_null(rc) && !json_is_string(rc))
				return param_wrong_type(p->e, pp, rc, "a string");
			if (json_is_string(rc)) {
				msg->reasoning = json_string_value(rc);
				msg->reasoning_len = json_string_length(rc);
			}
		} else if (!strcmp(role, "tool")) {
			msg->role = CHAT_TOOL;
			if (get_content(p, m, pp, 1, &msg->content, &msg->content_len))
				return -1;
			snprintf(pp, sizeof(pp), "messages[%zu].tool_call_id", i);
			if (param_string(p->e, m, "tool_call_id", pp, CHAT_MAX_ID,
				       &msg->tool_call_id))
				return -1;
			if (!msg->tool_call_id)
				return api_bad(p->e, pp, "Missing required parameter: '%s'.", pp), -1;
			if (check_tool_reply(p, i, msg->tool_call_id))
				return -1;
		} else if (!strcmp(role, "function")) {
			snprintf(pp, sizeof(pp), "messages[%zu].role", i);
			return api_bad(p->e, pp, "Invalid value for '%s': the deprecated 'function' role is not supported; use 'tool'.", pp), -1;
		} else {
			snprintf(pp, sizeof(pp), "messages[%zu].role", i);
			return api_bad(p->e, pp, "Invalid value for '%s': '%s'. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'.",
				       pp, role), -1;
		}
	}
	return 0;
}

/* ---- tools ---- */

static int parse_tools(struct parser *p, json_t *v)
{
	json_t *t;
	size_t i;
	char pp[96];

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v))
		return param_wrong_type(p->e, "tools", v, "an array");
	if (json_array_size(v) > CHAT_MAX_TOOLS)
		return api_bad(p->e, "tools", "Invalid 'tools': at most %d tools.", CHAT_MAX_TOOLS), -1;
	if (json_array_size(v) == 0)
		return 0;
	p->r->tools = calloc(json_array_size(v), sizeof(*p->r->tools));
	if (!p->r->tools)
		return api_error_set(p->e, 500, "server_error", NULL, NULL, "out of memory"), -1;
	json_array_foreach(v, i, t) {
		struct chat_tool *ct = &p->r->tools[i];
		json_t *type, *fn, *x;
		const char *s;

		snprintf(pp, sizeof(pp), "tools[%zu]", i);
		if (!json_is_object(t))
			return param_wrong_type(p->e, pp, t, "an object");
		type = json_object_get(t, "type");
		snprintf(pp, sizeof(pp), "tools[%zu].type", i);
		if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
			return api_bad(p->e, pp, "Invalid value for '%s': only tools of type 'function' are supported.", pp), -1;
		fn = json_object_get(t, "function");
		snprintf(pp, sizeof(pp), "tools[%zu].function", i);
		if (!json_is_object(fn)) {
			if (!fn)
				return api_bad(p->e, pp, "Missing required parameter: '%s'.", pp), -1;
			return param_wrong_type(p->e, pp, fn, "an object");
		}
		snprintf(pp, sizeof(pp), "tools[%zu].function.name", i);
		if (param_string(p->e, fn, "name", pp, TC_MAX_NAME, &ct->name))
			return -1;
		if (!ct->name || !tc_valid_name(ct->name, strlen(ct->name)))
			return api_bad(p->e, pp, "Invalid '%s': a function name is 1 to 64 of a-z, A-Z, 0-9, '_' and '-'.", pp), -1;
		for (size_t j = 0; j < i; j++)
			if (!strcmp(p->r->tools[j].name, ct->name))
				return api_bad(p->e, pp, "Invalid '%s': duplicate function name '%s'.", pp, ct->name), -1;
		snprintf(pp, sizeof(pp), "tools[%zu].function.description", i);
		if (param_string(p->e, fn, "description", pp, 64 * 1024, &s))
			return -1;
		x = json_object_get(fn, "parameters");
		snprintf(pp, sizeof(pp), "tools[%zu].function.parameters", i);
		if (x && !json_is_null(x) && !json_is_object(x))
			return param_wrong_type(p->e, pp, x, "an object");
		{
			struct chat_tool ck = { ct->name, fn };
			char why[200];

			/* OpenAI's rule: the arguments are an object */
			if (chat_tool_check(&ck, why, sizeof(why))) {
				api_error_set(p->e, 400, API_INVALID, "invalid_function_parameters", pp,
					      "%s", why);
				return -1;
			}
		}
		x = json_object_get(fn, "strict");
		snprintf(pp, sizeof(pp), "tools[%zu].function.strict", i);
		if (x && !json_is_null(x) && !json_is_boolean(x))
			return param_wrong_type(p->e, pp, x, "a boolean");
		ct->function = fn;
		p->r->n_tools = i + 1;
	}
	return 0;
}

static int parse_tool_choice(struct parser *p, json_t *v)
{
	const char *s;

	p->r->tool_choice = CHAT_TOOLS_AUTO;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_object(v)) {
		json_t *type = json_object_get(v, "type"), *fn = json_object_get(v, "function");
		const char *name = json_string_value(json_object_get(fn, "name"));
		size_t i;

		if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
			return api_bad(p->e, "tool_choice.type", "Invalid 'tool_choice.type': expected 'function'."), -1;
		if (!name)
			return api_bad(p->e, "tool_choice.function.name", "Missing required parameter: 'tool_choice.function.name'."), -1;
		for (i = 0; i < p->r->n_tools; i++)
			if (!strcmp(p->r->tools[i].name, name))
				break;
		if (i == p->r->n_tools)
			return api_bad(p->e, "tool_choice.function.name", "Invalid 'tool_choice': no tool named '%s' in 'tools'.", name), -1;
		p->r->tool_choice = CHAT_TOOLS_NAMED;
		p->r->tool_choice_name = name;
		return 0;
	}
	if (!json_is_string(v))
		return param_wrong_type(p->e, "tool_choice", v, "a string or an object");
	s = json_string_value(v);
	if (!strcmp(s, "auto"))
		return 0;
	if (!strcmp(s, "none")) {
		p->r->tool_choice = CHAT_TOOLS_NONE;
		return 0;
	}
	if (!strcmp(s, "required")) {
		if (!p->r->n_tools)
			return api_bad(p->e, "tool_choice", "Invalid 'tool_choice': 'required' needs 'tools'."), -1;
		p->r->tool_choice = CHAT_TOOLS_REQUIRED;
		return 0;
	}
	return api_bad(p->e, "tool_choice", "Invalid value for 'tool_choice': '%s'. Supported values are: 'none', 'auto' and 'required'.", s), -1;
}

/* The one place response formats are decided (the structured-decoding
 * hook): record the format, refuse what cannot be honoured yet. */
static int chat_response_format(struct parser *p, json_t *v)
{
	json_t *type;
	const char *t;

	p->r->format = CHAT_FORMAT_TEXT;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return param_wrong_type(p->e, "response_format", v, "an object");
	type = json_object_get(v, "type");
	if (!json_is_string(type))
		return type ? param_wrong_type(p->e, "response_format.type", type, "a string") :
			(api_bad(p->e, "response_format.type", "Missing required parameter: 'response_format.type'."), -1);
	t = json_string_value(type);
	if (!strcmp(t, "text"))
		return 0;
	if (!strcmp(t, "json_object"))
		p->r->format = CHAT_FORMAT_JSON_OBJECT;
	else if (!strcmp(t, "json_schema"))
		p->r->format = CHAT_FORMAT_JSON_SCHEMA;
	else
		return api_bad(p->e, "response_format.type", "Invalid value for 'response_format.type': '%s'. Supported values are: 'text', 'json_object' and 'json_schema'.", t), -1;
	if (p->r->format == CHAT_FORMAT_JSON_SCHEMA) {
		json_t *js = json_object_get(v, "json_schema");

		if (!json_is_object(js))
			return js ? param_wrong_type(p->e, "response_format.json_schema", js, "an object") :
				(api_bad(p->e, "response_format.json_schema", "Missing required parameter: 'response_format.json_schema'."), -1);
		p->r->json_schema = json_object_get(js, "schema");
		if (!json_is_object(p->r->json_schema))
			return api_bad(p->e, "response_format.json_schema.schema", "Missing or invalid 'response_format.json_schema.schema': expected a JSON Schema object."), -1;
	}
	return 0;
}

int param_stop(struct api_error *e, json_t *v, const char *key, struct kvd_sampling *s)
{
	json_t *x;
	size_t i;
	char pp[64];

	if (!v || json_is_null(v))
		return 0;
	if (json_is_string(v)) {
		x = v;
		i = 0;
		goto one;
	}
	if (!json_is_array(v))
		return param_wrong_type(e, key, v, "a string or an array of strings");
	if (json_array_size(v) > KVD_MAX_STOP)
		return api_bad(e, key, "Invalid '%s': at most %d stop sequences.", key, KVD_MAX_STOP), -1;
	json_array_foreach(v, i, x) {
one:
		if (json_is_array(v))
			snprintf(pp, sizeof(pp), "%s[%zu]", key, i);
		else
			snprintf(pp, sizeof(pp), "%s", key);
		if (!json_is_string(x))
			return param_wrong_type(e, pp, x, "a string");
		if (json_string_length(x) == 0 || json_string_length(x) > KVD_MAX_STOP_LEN)
			return api_bad(e, pp, "Invalid '%s': a stop sequence is 1 to %d bytes.",
				       pp, KVD_MAX_STOP_LEN), -1;
		s->stop[s->n_stop++] = json_string_value(x);
		if (!json_is_array(v))
			break;
	}
	return 0;
}

int param_stream_options(struct chat_request *r, json_t *root, int stream, int *include_usage,
			 struct api_error *e)
{
	json_t *so = json_object_get(root, "stream_options"), *k;
	const char *key;

	if (!so || json_is_null(so))
		return 0;
	if (!json_is_object(so))
		return param_wrong_type(e, "stream_options", so, "an object");
	if (!stream)
		return api_bad(e, "stream_options", "Invalid value for 'stream_options': only allowed when 'stream' is true."), -1;
	json_object_foreach(so, key, k) {
		if (!strcmp(key, "include_usage") && include_usage) {
			if (!json_is_boolean(k) && !json_is_null(k))
				return param_wrong_type(e, "stream_options.include_usage", k, "a boolean");
			*include_usage = json_is_true(k);
		} else if (!strcmp(key, "include_obfuscation")) {
			if (!json_is_boolean(k) && !json_is_null(k))
				return param_wrong_type(e, "stream_options.include_obfuscation", k, "a boolean");
			r->obfuscate = json_is_true(k);
		} else {
			api_error_set(e, 400, API_INVALID, "unknown_parameter", "stream_options",
				      "Unrecognized stream_options argument supplied: %s", key);
			return -1;
		}
	}
	return 0;
}

static int parse_stream(struct parser *p, json_t *root)
{
	if (param_bool(p->e, root, "stream", &p->r->stream))
		return -1;
	return param_stream_options(p->r, root, p->r->stream, &p->r->include_usage, p->e);
}

/* One of values (NULL-terminated; *which: its index, -1 when absent,
 * which may be NULL), or, for refused ones (NULL-terminated too), a 400
 * unsupported_value saying why. */
static int param_enum_at(struct api_error *e, json_t *v, const char *param,
			 const char *const *ok, const char *const *refused, const char *why,
			 int *which)
{
	const char *s;
	size_t i;

	if (which)
		*which = -1;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return param_wrong_type(e, param, v, "a string");
	s = json_string_value(v);
	for (i = 0; ok[i]; i++)
		if (!strcmp(s, ok[i])) {
			if (which)
				*which = (int)i;
			return 0;
		}
	for (i = 0; refused[i]; i++)
		if (!strcmp(s, refused[i])) {
			api_error_set(e, 400, API_INVALID, "unsupported_value", param,
				      "Unsupported value: '%s' for '%s': %s.", s, param, why);
			return -1;
		}
	api_bad(e, param, "Invalid value for '%s': '%.64s'.", param, s);
	return -1;
}

static int param_enum(struct api_error *e, json_t *o, const char *key, const char *param,
		      const char *const *ok, const char *const *refused, const char *why)
{
	return param_enum_at(e, json_object_get(o, key), param, ok, refused, why, NULL);
}

int param_verbosity(struct api_error *e, json_t *o, const char *key, const char *param)
{
	static const char *const ok[] = { "medium", NULL };
	static const char *const no[] = { "low", "high", NULL };

	return param_enum(e, o, key, param, ok, no,
			  "this model has one way of answering (medium, the default); it cannot be made terser or longer");
}

int param_serving(struct api_error *e, json_t *root)
{
	static const char *const tiers[] = { "auto", "default", NULL };
	static const char *const other_tiers[] = { "flex", "scale", "priority", NULL };
	static const char *const kept[] = { "in_memory", "in-memory", NULL };
	static const char *const longer[] = { "24h", NULL };
	json_t *v, *x;
	const char *key, *s;

	if (param_enum(e, root, "service_tier", "service_tier", tiers, other_tiers,
		       "this server has one service tier (default)") ||
	    param_enum(e, root, "prompt_cache_retention", "prompt_cache_retention", kept, longer,
		       "prompts' KV is kept in memory only, for the retention the server is configured with (Documentation/daemon.md)") ||
	    param_string(e, root, "safety_identifier", "safety_identifier", 64, &s))
		return -1;
	v = json_object_get(root, "metadata");
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v) || json_object_size(v) > 16)
		return api_bad(e, "metadata", "Invalid 'metadata': an object of at most 16 key-value pairs."), -1;
	json_object_foreach(v, key, x)
		if (strlen(key) > 64 || !json_is_string(x) || json_string_length(x) > 512)
			return api_bad(e, "metadata", "Invalid 'metadata': keys of at most 64 characters, string values of at most 512."), -1;
	return 0;
}

/* logit_bias: {"TOKEN_ID": BIAS, ...}, ids as decimal strings, biases
 * -100..100 (OpenAI's). The orchestrator checks ids against the
 * vocabulary. */
static int parse_logit_bias(struct chat_request *r, struct api_error *e, json_t *v)
{
	struct kvd_sampling *s = &r->s;
	const char *key;
	json_t *b;
	size_t i = 0;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return param_wrong_type(e, "logit_bias", v, "an object");
	if (json_object_size(v) > KVD_MAX_LOGIT_BIAS)
		return api_bad(e, "logit_bias", "Invalid 'logit_bias': at most %d entries.",
			       KVD_MAX_LOGIT_BIAS), -1;
	if (!json_object_size(v))
		return 0;
	r->bias = calloc(json_object_size(v), sizeof(*r->bias));
	if (!r->bias)
		return api_error_set(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
	json_object_foreach(v, key, b) {
		char *end;
		long long id = strtoll(key, &end, 10);
		double x;

		/* digits only: strtoll would take a sign or leading blanks */
		if (!isdigit((unsigned char)key[0]) || *end || id > INT32_MAX ||
		    (key[0] == '0' && key[1]))
			return api_bad(e, "logit_bias", "Invalid key in 'logit_bias': '%s' is not a token id.",
				       key), -1;
		if (!json_is_number(b))
			return param_wrong_type(e, "logit_bias", b, "a number");
		x = json_number_value(b);
		if (!isfinite(x) || x < -100 || x > 100)
			return api_bad(e, "logit_bias", "Invalid value in 'logit_bias': %g is not within [-100, 100].",
				       x), -1;
		r->bias[i].token = (int32_t)id;
		r->bias[i].bias = (float)x;
		i++;
	}
	s->logit_bias = r->bias;
	s->n_logit_bias = (uint32_t)i;
	return 0;
}

/*
 * Sampling parameters beyond OpenAI's, named as vLLM and llama.cpp's
 * server name them (clients written for those send them): top_k, min_p,
 * repetition_penalty (llama.cpp: repeat_penalty), ignore_eos; and our
 * extension object "kvarena" ({"close_in_budget": bool}: structured
 * decoding steers the output to close within max_tokens).
 */
int param_extra_sampling(struct chat_request *r, json_t *root, struct api_error *e)
{
	struct kvd_sampling *s = &r->s;
	json_int_t k = 0;
	int has_k;
	double d = 0, rp = 1, rp2 = 1;
	json_t *x, *v;
	const char *key;

	if (param_int(e, root, "top_k", -1, INT32_MAX, &k, &has_k))
		return -1;
	s->top_k = k > 0 ? (uint32_t)k : 0;	/* vLLM: -1 is off; llama.cpp: 0 */
	if (param_number(e, root, "min_p", 0, 1, &d))
		return -1;
	s->min_p = (float)d;
	if (param_number(e, root, "repetition_penalty", 0, 10, &rp) ||
	    param_number(e, root, "repeat_penalty", 0, 10, &rp2))
		return -1;
	if (param_given(root, "repetition_penalty") && param_given(root, "repeat_penalty") &&
	    rp != rp2)
		return api_bad(e, "repeat_penalty", "Set only one of 'repetition_penalty' and 'repeat_penalty'."), -1;
	if (!param_given(root, "repetition_penalty"))
		rp = rp2;
	if (rp == 0)
		return api_bad(e, "repetition_penalty", "Invalid value for 'repetition_penalty': it must be above 0 (1 is off)."), -1;
	s->repetition_penalty = (float)rp;
	if (param_bool(e, root, "ignore_eos", &s->ignore_eos) ||
	    parse_logit_bias(r, e, json_object_get(root, "logit_bias")))
		return -1;
	x = json_object_get(root, "kvarena");
	if (!x || json_is_null(x))
		return 0;
	if (!json_is_object(x))
		return param_wrong_type(e, "kvarena", x, "an object");
	json_object_foreach(x, key, v) {
		if (!strcmp(key, "close_in_budget")) {
			if (!json_is_boolean(v))
				return param_wrong_type(e, "kvarena.close_in_budget", v, "a boolean");
			s->close_in_budget = json_is_true(v);
		} else {
			api_error_set(e, 400, API_INVALID, "unknown_parameter", "kvarena",
				      "Unrecognized argument in 'kvarena': %s", key);
			return -1;
		}
	}
	return 0;
}

static int parse_sampling(struct parser *p, json_t *root)
{
	struct kvd_sampling *s = &p->r->s;
	struct api_error *e = p->e;
	json_int_t mt = 0, mct = 0, seed = 0, n = 1, top = 0;
	int has_mt, has_mct, has_seed, has_n, has_top;
	double d = 1.0;

	if (param_number(e, root, "temperature", 0, 2, &d))
		return -1;
	s->temperature = (float)d;
	d = 1.0;
	if (param_number(e, root, "top_p", 0, 1, &d))
		return -1;
	s->top_p = (float)d;
	d = 0;
	if (param_number(e, root, "frequency_penalty", -2, 2, &d))
		return -1;
	s->frequency_penalty = (float)d;
	d = 0;
	if (param_number(e, root, "presence_penalty", -2, 2, &d))
		return -1;
	s->presence_penalty = (float)d;
	if (param_extra_sampling(p->r, root, e))
		return -1;
	if (param_int(e, root, "seed", INT64_MIN, INT64_MAX, &seed, &has_seed))
		return -1;
	s->seed = (uint64_t)seed;
	s->has_seed = has_seed;
	if (param_int(e, root, "max_tokens", 1, UINT32_MAX, &mt, &has_mt) ||
	    param_int(e, root, "max_completion_tokens", 1, UINT32_MAX, &mct, &has_mct))
		return -1;
	if (has_mt && has_mct && mt != mct)
		return api_bad(e, "max_tokens", "Set only one of 'max_tokens' and 'max_completion_tokens'."), -1;
	s->max_tokens = (uint32_t)(has_mct ? mct : mt);
	if (param_int(e, root, "n", 1, CHAT_MAX_CHOICES, &n, &has_n))
		return -1;
	p->r->n = (unsigned)n;
	if (param_bool(e, root, "logprobs", &s->logprobs))
		return -1;
	if (param_int(e, root, "top_logprobs", 0, KVD_MAX_TOP_LOGPROBS, &top, &has_top))
		return -1;
	if (has_top && !s->logprobs)
		return api_bad(e, "top_logprobs", "Invalid value for 'top_logprobs': 'logprobs' must be true to use it."), -1;
	s->top_logprobs = (uint32_t)top;
	return param_stop(e, json_object_get(root, "stop"), "stop", &p->r->s);
}

/* Parameters that would change the output and are not implemented. */
static int refuse_if_set(struct parser *p, json_t *root, const char *key,
			 const char *why)
{
	json_t *v = json_object_get(root, key);

	if (!v || json_is_null(v))
		return 0;
	api_error_set(p->e, 400, API_INVALID, "unsupported_parameter", key,
		      "Unsupported parameter: '%s' %s.", key, why);
	return -1;
}

/*
 * The think budget of each effort: what a family that thinks (qwen3) may
 * spend before its think block is closed and the reply goes on (gen.c).
 * Such a family has no effort of its own, only a length; xhigh: no
 * budget but max_tokens.
 */
uint32_t chat_effort_budget(enum chat_effort effort)
{
	static const uint32_t budget[] = {
		[CHAT_EFFORT_LOW] = 1024, [CHAT_EFFORT_MEDIUM] = 4096, [CHAT_EFFORT_HIGH] = 16384,
	};

	return effort > CHAT_EFFORT_UNSET && effort < CHAT_EFFORT_XHIGH ? budget[effort] : 0;
}

/* OpenAI's efforts: none and minimal, then enum chat_effort's from low */
static const char *const effort_names[] = { "none", "minimal", "low", "medium", "high", "xhigh",
					    NULL };

const char *chat_effort_name(enum chat_effort effort)
{
	return effort > CHAT_EFFORT_UNSET && effort <= CHAT_EFFORT_XHIGH ?
		effort_names[effort - CHAT_EFFORT_LOW + 2] : "";
}

int param_effort(struct chat_request *r, json_t *v, const char *param, struct api_error *e)
{
	static const char *const none[] = { NULL };
	int i;

	if (param_enum_at(e, v, param, effort_names, none, "", &i))
		return -1;
	/* OpenAI's "no reasoning" and "as little as possible": a family
	 * that cannot think a little thinks not at all */
	if (i == 0 || i == 1) {
		r->thinking = CHAT_THINK_OFF;
	} else if (i > 1) {
		r->effort = (enum chat_effort)(CHAT_EFFORT_LOW + (i - 2));
		r->effort_param = param;
	}
	return 0;
}

/* What says how to serve rather than what to generate: each honoured
 * or refused (param_serving and the rest), never accepted and ignored. */
static int check_serving(struct parser *p, json_t *root)
{
	json_t *v;
	size_t i;

	if (param_serving(p->e, root) || param_verbosity(p->e, root, "verbosity", "verbosity"))
		return -1;
	v = json_object_get(root, "store");
	if (v && !json_is_null(v) && !json_is_boolean(v))
		return param_wrong_type(p->e, "store", v, "a boolean");
	if (json_is_true(v))
		return api_error_set(p->e, 400, API_INVALID, "unsupported_value", "store",
				     "Unsupported value: 'store': true: this server does not keep chat completions (no GET /v1/chat/completions/{id}); /v1/responses stores responses."), -1;
	v = json_object_get(root, "modalities");
	if (v && !json_is_null(v)) {
		json_t *m;

		if (!json_is_array(v))
			return param_wrong_type(p->e, "modalities", v, "an array");
		json_array_foreach(v, i, m)
			if (!json_is_string(m) || strcmp(json_string_value(m), "text"))
				return api_error_set(p->e, 400, API_INVALID, "unsupported_value", "modalities",
						     "Invalid value for 'modalities': this server produces text only."), -1;
	}
	return refuse_if_set(p, root, "audio", "is not supported: this server produces text only") ||
		refuse_if_set(p, root, "prediction", "is not supported by this server") ||
		refuse_if_set(p, root, "web_search_options", "is not supported by this server") ||
		refuse_if_set(p, root, "functions", "is deprecated and not supported; use 'tools'") ||
		refuse_if_set(p, root, "function_call", "is deprecated and not supported; use 'tool_choice'") ?
		-1 : 0;
}

/*
 * llama.cpp's reasoning budget (thinking_budget_tokens, or its other name
 * reasoning_budget_tokens): -1 none, 0 no thinking (as enable_thinking
 * false), N the think block is closed after N tokens (gen.c).
 */
static int parse_budget(struct parser *p, json_t *root)
{
	json_int_t a = -1, b = -1;
	int has_a, has_b;

	if (param_int(p->e, root, "thinking_budget_tokens", -1, UINT32_MAX, &a, &has_a) ||
	    param_int(p->e, root, "reasoning_budget_tokens", -1, UINT32_MAX, &b, &has_b))
		return -1;
	if (has_a && has_b && a != b)
		return api_bad(p->e, "reasoning_budget_tokens", "Set only one of 'thinking_budget_tokens' and 'reasoning_budget_tokens'."), -1;
	if (has_b)
		a = b;
	else if (!has_a)
		return 0;
	if (a == 0)
		p->r->thinking = CHAT_THINK_OFF;
	else if (a > 0)
		p->r->think_budget = (uint32_t)a;
	return 0;
}

/*
 * Whether a family that thinks (qwen3) reasons first: the template
 * argument llama.cpp's and vLLM's servers pass through
 * (chat_template_kwargs {"enable_thinking": false}), or OpenAI's
 * reasoning_effort "none" (its other values: a think budget, gen.c),
 * and how long (llama.cpp's budget). Other template arguments are refused: the
 * templates are rendered in C (daemon/chat), not run.
 */
static int parse_thinking(struct parser *p, json_t *root)
{
	json_t *v = json_object_get(root, "chat_template_kwargs"), *x;
	const char *key, *fmt;

	if (param_effort(p->r, json_object_get(root, "reasoning_effort"), "reasoning_effort", p->e))
		return -1;
	/* llama.cpp's reasoning_format: where the reasoning goes */
	x = json_object_get(root, "reasoning_format");
	if (x && !json_is_null(x)) {
		fmt = json_string_value(x);
		if (!fmt)
			return param_wrong_type(p->e, "reasoning_format", x, "a string");
		if (!strcmp(fmt, "none"))
			p->r->reasoning_inline = 1;
		else if (strcmp(fmt, "auto") && strcmp(fmt, "deepseek"))
			return api_error_set(p->e, 400, API_INVALID, "unsupported_value", "reasoning_format",
					     "Unsupported value: 'reasoning_format' '%s': auto or deepseek (the reasoning in reasoning_content), none (kept in the content).",
					     fmt), -1;
	}
	if (parse_budget(p, root))
		return -1;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return param_wrong_type(p->e, "chat_template_kwargs", v, "an object");
	json_object_foreach(v, key, x) {
		if (strcmp(key, "enable_thinking")) {
			api_error_set(p->e, 400, API_INVALID, "unknown_parameter", "chat_template_kwargs",
				      "Unrecognized argument in 'chat_template_kwargs': %s (the model's template is rendered by kvarenad, which takes enable_thinking only).",
				      key);
			return -1;
		}
		if (!json_is_boolean(x))
			return param_wrong_type(p->e, "chat_template_kwargs.enable_thinking", x,
						"a boolean");
		p->r->thinking = json_is_true(x) ? CHAT_THINK_ON : CHAT_THINK_OFF;
	}
	return 0;
}

/* OpenAI's chat-completions parameters; anything else is refused. */
static const char *const known_keys[] = {
	"model", "messages", "tools", "tool_choice", "parallel_tool_calls",
	"stream", "stream_options", "max_tokens", "max_completion_tokens",
	"temperature", "top_p", "seed", "stop", "logprobs", "top_logprobs",
	"n", "user", "prompt_cache_key", "response_format",
	"frequency_penalty", "presence_penalty", "metadata", "store",
	"service_tier", "reasoning_effort", "verbosity", "safety_identifier",
	"prompt_cache_retention", "modalities", "logit_bias", "audio",
	"prediction", "web_search_options", "functions", "function_call",
	/* vLLM's and llama.cpp's sampling parameters, and ours */
	"top_k", "min_p", "repetition_penalty", "repeat_penalty", "ignore_eos",
	"kvarena",
	/* vLLM's and llama.cpp's template arguments (enable_thinking) */
	"chat_template_kwargs",
	/* llama.cpp's: where a thinking family's reasoning goes, and how
	 * long it may be */
	"reasoning_format", "thinking_budget_tokens", "reasoning_budget_tokens",
};

int chat_request_begin(const char *body, size_t len, const char *model_id,
		       const char *const *known, size_t n_known, struct chat_request *r,
		       struct api_error *e)
{
	json_error_t jerr;
	json_t *v;
	const char *key;

	memset(r, 0, sizeof(*r));
	r->n = 1;
	r->parallel_tool_calls = 1;
	r->s.temperature = 1.0f;
	r->s.top_p = 1.0f;
	r->s.repetition_penalty = 1.0f;
	r->keep = json_array();
	if (!r->keep)
		return api_error_set(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
	r->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!r->root) {
		api_bad(e, NULL, "We could not parse the JSON body of your request: %s (line %d, column %d). The body must be valid UTF-8 JSON.",
			jerr.text, jerr.line, jerr.column);
		return -1;
	}
	if (!json_is_object(r->root))
		return api_bad(e, NULL, "The request body must be a JSON object, not %s.",
			       param_type_name(r->root)), -1;
	json_object_foreach(r->root, key, v) {
		size_t i;

		for (i = 0; i < n_known; i++)
			if (!strcmp(key, known[i]))
				break;
		if (i == n_known) {
			api_error_set(e, 400, API_INVALID, "unknown_parameter", key,
				      "Unrecognized request argument supplied: %s", key);
			return -1;
		}
	}
	if (param_string(e, r->root, "model", "model", 256, &r->model))
		return -1;
	if (!r->model)
		return api_bad(e, "model", "Missing required parameter: 'model'."), -1;
	if (strcmp(r->model, model_id)) {
		api_error_set(e, 404, API_INVALID, "model_not_found", "model",
			      "The model '%s' does not exist or you do not have access to it.",
			      r->model);
		return -1;
	}
	return 0;
}

const char *chat_request_keep(struct chat_request *r, const char *s, size_t n)
{
	json_t *j = json_stringn_nocheck(s, n);

	if (!j || json_array_append_new(r->keep, j))
		return NULL;
	return json_string_value(j);
}

int chat_request_parse(const char *body, size_t len, const char *model_id,
		       struct chat_request *r, struct api_error *e)
{
	struct parser p = { .r = r, .e = e };

	if (chat_request_begin(body, len, model_id, known_keys,
			       sizeof(known_keys) / sizeof(known_keys[0]), r, e))
		return -1;
	if (parse_messages(&p, json_object_get(r->root, "messages")) ||
	    parse_tools(&p, json_object_get(r->root, "tools")) ||
	    parse_tool_choice(&p, json_object_get(r->root, "tool_choice")) ||
	    param_bool(e, r->root, "parallel_tool_calls", &r->parallel_tool_calls) ||
	    parse_stream(&p, r->root) || parse_sampling(&p, r->root) ||
	    param_string(e, r->root, "user", "user", CHAT_MAX_ID, &r->user) ||
	    param_string(e, r->root, "prompt_cache_key", "prompt_cache_key",
		       CHAT_MAX_ID, &r->prompt_cache_key) ||
	    chat_response_format(&p, json_object_get(r->root, "response_format")) ||
	    check_serving(&p, r->root) || parse_thinking(&p, r->root))
		return -1;
	return 0;
}

void chat_request_free(struct chat_request *r)
{
	for (size_t i = 0; i < r->n_msgs; i++)
		free(r->msgs[i].calls);
	free(r->msgs);
	free(r->tools);
	free(r->bias);
	json_decref(r->root);
	json_decref(r->keep);
	memset(r, 0, sizeof(*r));
}
