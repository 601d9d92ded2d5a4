/* SPDX-License-Identifier: MIT */
/*
 * chat_internal.h - what the files of daemon/chat/ share: a family's
 * operations (one file per family renders its template) and the template
 * handle that binds a family to one model's parameters.
 */
#ifndef KVD_CHAT_INTERNAL_H
#define KVD_CHAT_INTERNAL_H

#include "chat.h"

struct chat_family {
	const char *name;
	/* the token text that ends an assistant turn */
	const char *eot;
	enum tc_syntax syntax;		/* how its calls are written */
	int think;			/* a reply may open with <think>...</think> */
	/* the decoder's shape of its calls (hermes: the tags are the
	 * template's), the markers a parser must see, the end-of-turn
	 * tokens (NULL-terminated; eog[0] is eot) */
	const struct chat_call_grammar *grammar;
	const char *const *markers;
	const char *const *eog;
	/* 1 when a template text is this family's (auto detection) */
	int (*detect)(const char *tmpl, size_t len);
	/* reads the model's parameters from its template text (may be
	 * NULL: none, or the family was forced); 0 or -ENOMEM */
	int (*setup)(struct chat_template *t, const char *tmpl, size_t len);
	int (*render)(const struct chat_template *t, const struct chat_conv *c,
		      struct chat_prompt *p, char *err, size_t errlen);
	int (*render_round)(const struct chat_template *t,
			    const struct chat_tool_result *r, size_t n,
			    struct chat_prompt *p);
	/* what the template writes back for a parsed reply (an assistant
	 * message with its content and calls, between the generation prompt
	 * and the end of the turn) */
	void (*body)(const struct chat_template *t, const struct tc_result *r,
		     struct strbuf *b);
};

/* A string read from the template (scan.c): its text, and the offsets at
 * which the template inserts the date ("today"). */
#define CHAT_TEXT_HOLES 2
struct chat_text {
	char *s;			/* NULL: none */
	size_t len;
	size_t hole[CHAT_TEXT_HOLES];
	unsigned n_holes;
};

struct chat_template {
	const struct chat_family *f;
	struct tc_tags tags;		/* Hermes-syntax families */
	char why[160];			/* how the family was chosen */
	int variant;			/* the family's own (e.g. Qwen 2.5 or 3) */
	struct chat_text system;	/* the default system message, if any */
};

extern const struct chat_family chat_family_chatml;
extern const struct chat_family chat_family_qwen25;
extern const struct chat_family chat_family_qwen3;
extern const struct chat_family chat_family_llama3;
extern const struct chat_family chat_family_mistral_v3;
extern const struct chat_family chat_family_mistral_v7;
extern const struct chat_family chat_family_mistral_v11;

/* The date of now (0: the current time), local time, as strftime writes
 * fmt ("%d %b %Y"). */
void chat_date(int64_t now, const char *fmt, char *out, size_t size);

/* tool_call.c, for tool_call_tail.c */
void tc_emit(struct tc_stream *s, enum tc_event ev, const char *p, size_t n,
	     const struct tc_call *call);
size_t tc_partial_tag(const char *text, size_t n, const char *tag);
/* The verbatim value of key in the JSON object s (known valid); -1 none. */
int tc_find_member(const char *s, size_t n, const char *key, size_t *off, size_t *len);
/* tool_call_tail.c: the syntaxes whose calls end the reply */
void tc_tail_feed(struct tc_stream *s, const char *text, size_t len);
void tc_tail_finish(struct tc_stream *s);
/* A Mistral call id: 9 alphanumerics from getrandom() */
void tc_make_short_id(char out[10]);
/* 1 when id is 9 alphanumerics */
int tc_short_id(const char *id, size_t len);

/* A parsed reply as an assistant message (m->calls malloc'd); -ENOMEM. */
int chat_result_msg(const struct tc_result *r, struct chat_msg *m);

/* scan.c */
int chat_has(const char *tmpl, size_t len, const char *marker);
/* The string expression ('a' + today + "b", or such an output statement)
 * after the anchors, found one after the other (a NULL-terminated list);
 * -1 when there is none. out->s is malloc'd. */
int chat_scan_string(const char *tmpl, size_t len, const char *const *anchors,
		     struct chat_text *out);

/* json.c: JSON as the templates' tojson writes it (indent < 0: one line). */
void chat_tojson(struct strbuf *b, const json_t *v, int indent);
void chat_tojson_plain(struct chat_prompt *p, const json_t *v, int indent);
/* A tool as llama.cpp hands it to a template: {"name", "description" (""
 * when none), "parameters" ({} when none)}, wrapped in {"type":
 * "function", "function": ...} when wrap; NULL when out of memory. */
json_t *chat_tool_decl(const struct chat_tool *t, int wrap);
/* A call's arguments parsed (any JSON value); -1 when they are not JSON. */
int chat_args_json(const char *args, size_t len, json_t **out);
/* The arguments as tojson writes the parsed value (verbatim when they do
 * not parse), plain. */
void chat_args_plain(struct chat_prompt *p, const struct chat_call *c);

#endif
