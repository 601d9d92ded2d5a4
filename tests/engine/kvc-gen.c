// SPDX-License-Identifier: MIT
/*
 * kvc-gen - the property test's generator: for every spec of a JSONL file
 * (random schemas, json_object, tool sets, written by constrain-prop.js)
 * samples completions from a random-weight model under the constraint,
 * and one without it, and prints one JSON line per completion with its
 * bytes in hex. constrain-prop.js validates them independently (ajv).
 *
 * usage: kvc-gen MODEL SPECS.jsonl SAMPLES MAX_TOKENS
 * spec line: {"id": N, "kind": "schema"|"object"|"tools", "schema": {...},
 *             "tools": [...], "choice": "required"|"auto"|NAME,
 *             "parallel": true|false}
 */
#include "cgen.h"

#include <jansson.h>

static void put_hex(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		printf("%02x", (unsigned char)s[i]);
}

int main(int argc, char **argv)
{
	struct cgen c;
	char err[512], line[1 << 16];
	FILE *f;
	int samples, maxtok;
	const char *mname;

	if (argc != 5) {
		fprintf(stderr, "usage: kvc-gen MODEL SPECS.jsonl SAMPLES MAX_TOKENS\n");
		return 2;
	}
	samples = atoi(argv[3]);
	maxtok = atoi(argv[4]);
	mname = strrchr(argv[1], '/') ? strrchr(argv[1], '/') + 1 : argv[1];
	if (cgen_open(&c, argv[1], err, sizeof(err))) {
		fprintf(stderr, "kvc-gen: %s\n", err);
		return 1;
	}
	f = fopen(argv[2], "r");
	if (!f) {
		perror(argv[2]);
		return 1;
	}
	while (fgets(line, sizeof(line), f)) {
		json_error_t je;
		json_t *j = json_loads(line, 0, &je), *body;
		struct kvc_spec sp = { 0 };
		struct kvc_grammar *g = NULL;
		const char *kind, *choice;
		char *text = NULL;
		unsigned flags = 0;
		int id, s;

		if (!j) {
			fprintf(stderr, "kvc-gen: bad spec line: %s\n", je.text);
			return 1;
		}
		id = (int)json_integer_value(json_object_get(j, "id"));
		kind = json_string_value(json_object_get(j, "kind"));
		choice = json_string_value(json_object_get(j, "choice"));
		if (!kind)
			kind = "";
		if (!strcmp(kind, "object")) {
			sp.kind = KVC_JSON_OBJECT;
		} else {
			int tools = !strcmp(kind, "tools");
			body = json_object_get(j, tools ? "tools" : "schema");
			text = json_dumps(body, JSON_ENCODE_ANY | JSON_COMPACT);
			sp.kind = tools ? KVC_TOOL_CALLS : KVC_JSON_SCHEMA;
			sp.json = text;
			sp.json_len = text ? strlen(text) : 0;
			if (tools) {
				sp.max_calls = json_is_true(json_object_get(j, "parallel")) ? 3 : 1;
				if (choice && !strcmp(choice, "auto"))
					flags = KVC_LAZY;
				else if (choice && strcmp(choice, "required"))
					sp.tool_name = choice;
			}
		}
		if (kvc_compile(c.v, &sp, &g, err, sizeof(err))) {
			json_t *e = json_pack("{s:i,s:s,s:s}", "id", id, "model", mname, "error", err);
			char *t = json_dumps(e, JSON_COMPACT);
			printf("%s\n", t);
			free(t);
			json_decref(e);
		}
		for (s = 0; g && s <= samples; s++) {
			struct cgen_out o;
			int constrained = s < samples;
			uint64_t seed = (uint64_t)id * 1000 + (uint64_t)s;

			cgen_run(&c, constrained ? g : NULL, flags, "The arena hands out memory in blocks.",
				 seed, 1.0f, (uint32_t)maxtok, 0, &o);
			printf("{\"id\":%d,\"model\":\"%s\",\"mode\":\"%s\",\"seed\":%llu,\"tokens\":%u,"
			       "\"complete\":%s,\"errors\":%d,\"triggered\":%s,\"hex\":\"",
			       id, mname, constrained ? "c" : "u", (unsigned long long)seed, o.tokens,
			       o.complete ? "true" : "false", o.errors, o.triggered ? "true" : "false");
			put_hex(o.text, o.len);
			printf("\"}\n");
			free(o.text);
		}
		fflush(stdout);
		kvc_grammar_release(g);
		free(text);
		json_decref(j);
	}
	fclose(f);
	cgen_close(&c);
	return 0;
}
