/* SPDX-License-Identifier: MIT */
/*
 * kvconstrain.h - public API of the engine's constrained decoding: JSON
 * Schema (a subset), any JSON object, or tool calls wrapped in
 * <tool_call>...</tool_call>, compiled into a byte automaton whose
 * per-state token sets are computed once per vocabulary, so that a decode
 * step only copies a precomputed mask. See Documentation/constrain.md.
 *
 * Objects and threads:
 *  - struct kvc_vocab: one per tokenizer (model). Holds the token trie and
 *    the content-addressed cache of compiled grammars (with its own lock).
 *    Must outlive every grammar and matcher made from it.
 *  - struct kvc_grammar: compiled and bound to a vocabulary; immutable and
 *    reference counted, so any number of threads and matchers share one.
 *  - struct kvc_matcher: per request; not shared between threads.
 * Functions returning int give 0 or a negative errno; those that can fail
 * on user input write a one-line message naming the problem to err.
 */
#ifndef KVCONSTRAIN_H
#define KVCONSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "kvengine.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvc_vocab;
struct kvc_grammar;
struct kvc_matcher;

/* Nesting of free-form JSON (json_object, schemas without properties)
 * plus the tool-call frame: deeper values are not generated. */
#define KVC_MAX_DEPTH 32
/* Default bound on whitespace bytes at one place between JSON tokens. */
#define KVC_DEFAULT_WS 8
/* Default bound on tool calls in one answer (parallel_tool_calls). */
#define KVC_DEFAULT_CALLS 4
/* Largest schema text, tools text and compiled automaton accepted. */
#define KVC_MAX_SPEC_BYTES (1u << 20)
#define KVC_MAX_STATES 65536

/* n_vocab: the model's vocabulary (logits per step); eos: the token
 * that ends a completed output (kve_tokenizer_eos), or -1. */
struct kvc_vocab *kvc_vocab_create(const struct kve_tokenizer *t,
				   uint32_t n_vocab, char *err, size_t errlen);
void kvc_vocab_free(struct kvc_vocab *v);
/* Bitset words for a mask: (n_vocab + 31) / 32 uint32_t, bit i of word
 * i / 32 is token i. */
uint32_t kvc_mask_words(const struct kvc_vocab *v);

/*
 * How tool calls are written (kvc_spec.syntax; NULL: Hermes, each call
 * start_tag {"name": NAME, "arguments": ARGS} end_tag, whitespace between).
 * The calls are
 *     list_open CALL (list_sep CALL)* list_close
 * with CALL = call_open BODY call_close, and BODY either
 *     {"name": NAME, "ARGS_KEY": ARGS[, "id": "ID"]}   (whitespace as JSON allows)
 *     NAME[id_mark ID]args_mark ARGS                    (name_args; no whitespace)
 * ID is 9 alphanumerics; NULL strings are empty, but a NULL list_sep is
 * whitespace only (as between Hermes calls). With KVC_LAZY the output is
 * free until the trigger (NULL: call_open, else list_open); anchored: the
 * trigger counts only at the very start of the output (whitespace aside),
 * and once anything else was written the rest is free.
 */
struct kvc_call_syntax {
	const char *list_open, *list_sep, *list_close;
	const char *call_open, *call_close;
	int name_args;
	const char *args_key;	/* JSON body: NULL "arguments" */
	int id;
	const char *id_mark, *args_mark;
	const char *trigger;
	int anchored;
};

enum kvc_kind {
	KVC_JSON_SCHEMA = 1,	/* json: a JSON Schema (response_format json_schema) */
	KVC_JSON_OBJECT = 2,	/* any JSON object (response_format json_object) */
	KVC_TOOL_CALLS = 3,	/* json: OpenAI "tools" array */
};

struct kvc_spec {
	enum kvc_kind kind;
	const char *json;	/* schema or tools text; NULL for JSON_OBJECT */
	size_t json_len;
	/* TOOL_CALLS: only this tool (tool_choice named); NULL: any of them */
	const char *tool_name;
	/* TOOL_CALLS: at most this many calls (1 when parallel_tool_calls is
	 * false); 0: KVC_DEFAULT_CALLS. At least one call is made. */
	uint32_t max_calls;
	/* TOOL_CALLS: NULL: "<tool_call>" and "</tool_call>" */
	const char *start_tag, *end_tag;
	/* TOOL_CALLS: another family's syntax (start_tag and end_tag then
	 * unused); NULL: Hermes */
	const struct kvc_call_syntax *syntax;
	/* TOOL_CALLS with KVC_LAZY: a block the output may open with
	 * (skip_open at its very start, up to skip_close: a reasoning
	 * "<think>...</think>") in which the trigger is not looked for;
	 * NULL: none */
	const char *skip_open, *skip_close;
	/* whitespace bytes allowed at one place; 0: KVC_DEFAULT_WS */
	uint32_t max_ws;
};

/* Compiles spec (or takes it from v's cache: same kind, options and
 * schema content, whitespace and key order aside) into *out, holding one
 * reference. -EINVAL with err naming the unsupported keyword or the bad
 * value and its place ("/properties/x: unsupported keyword 'pattern'"),
 * -E2BIG when the automaton exceeds KVC_MAX_STATES, -ENOMEM. */
int kvc_compile(struct kvc_vocab *v, const struct kvc_spec *spec,
		struct kvc_grammar **out, char *err, size_t errlen);
void kvc_grammar_release(struct kvc_grammar *g);

struct kvc_grammar_stats {
	uint32_t nfa_states, dfa_states, token_sets;
	/* what table_bytes counts, 4 bytes per entry: dfa_states x
	 * (byte_classes + 1) transitions, bitset_sets x ceil(n_vocab / 32)
	 * words, listed_ids (the sets too sparse for a bitset) and
	 * maybe_ids (tokens decided only by the stack) */
	uint32_t byte_classes, bitset_sets, listed_ids, maybe_ids;
	uint64_t table_bytes;	/* token sets and transitions */
	double compile_ms;	/* schema -> automaton -> token sets */
	int cached;		/* the last kvc_compile found it in the cache */
};
void kvc_grammar_stats(const struct kvc_grammar *g, struct kvc_grammar_stats *st);

/* KVC_LAZY (TOOL_CALLS only): free text until the model emits the start
 * tag, constrained from there on (tool_choice "auto"). Without it the
 * output must start with the call (ws aside). */
#define KVC_LAZY 1u

/* A per-request matcher; takes its own reference on g. */
struct kvc_matcher *kvc_matcher_create(struct kvc_grammar *g, unsigned flags);
void kvc_matcher_free(struct kvc_matcher *m);
/* An independent copy at the same point (e.g. to try a token, or for
 * several choices sharing a prefix); NULL when out of memory. */
struct kvc_matcher *kvc_matcher_clone(const struct kvc_matcher *m);

/* Writes the allowed next tokens to mask (kvc_mask_words() words). EOS is
 * allowed only where the output is complete. Returns the number of
 * allowed tokens (0 only once the output has ended with EOS). */
int kvc_mask(struct kvc_matcher *m, uint32_t *mask);
/* Consumes a token. -EPERM when the token is not allowed (the matcher is
 * unchanged), -EINVAL for a bad id. */
int kvc_advance(struct kvc_matcher *m, int32_t token);
/* 1 when the output so far is complete (EOS allowed now). */
int kvc_accepting(const struct kvc_matcher *m);
/* 1 when nothing can follow: EOS was consumed, or the output is complete
 * and no further byte is allowed. Stop generating. */
int kvc_finished(const struct kvc_matcher *m);
/* The fewest bytes that still complete the output (0: complete now). */
uint32_t kvc_remaining(const struct kvc_matcher *m);
/* kvc_mask restricted to the tokens after which the output can still be
 * completed within tokens_left - 1 more tokens (counting, at worst, one
 * token per byte), and EOS once complete: a generation near its token
 * limit closes its JSON instead of stopping inside a value. Keeping
 * kvc_remaining() <= tokens_left at every step guarantees completion.
 * Costs a simulation per allowed token: use it only near the limit, e.g.
 * while tokens_left <= kvc_remaining() + 256. */
int kvc_mask_budget(struct kvc_matcher *m, uint32_t *mask, uint32_t tokens_left);
/* KVC_LAZY: 1 once the start tag has been seen (output is constrained) */
int kvc_triggered(const struct kvc_matcher *m);

#ifdef __cplusplus
}
#endif
#endif
