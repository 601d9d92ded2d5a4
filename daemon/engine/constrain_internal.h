/* SPDX-License-Identifier: MIT */
/*
 * constrain_internal.h - what the constrained-decoding files share: the
 * byte NFA that json_schema.c builds, the DFA grammar.c makes of it, and
 * the entry of json_schema.c. Not installed.
 *
 * The automaton is a DFA over bytes extended with calls: a state may call
 * a sub-automaton (free-form JSON containers, a tool call) whose entry
 * state starts with a byte no other edge of the caller takes; the caller's
 * return state is pushed, and a state flagged RETURN pops it when it has
 * no edge for the next byte. Free-form JSON nests, so it cannot be a
 * plain DFA; everything else is inlined.
 */
#ifndef KVC_CONSTRAIN_INTERNAL_H
#define KVC_CONSTRAIN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvconstrain.h"

/* ---- NFA (grammar.c) ----------------------------------------------- */

enum { NE_BYTE = 0, NE_EPS = 1, NE_CALL = 2 };
#define NF_ACCEPT 1u	/* the whole output may end here (root frame) */
#define NF_RETURN 2u	/* a called sub-automaton may return here */

struct nfa_edge {
	int32_t from, to;
	int32_t entry;		/* NE_CALL: the callee's entry state */
	uint8_t kind, lo, hi;
};

struct nfa {
	uint32_t n, cap;
	uint8_t *flags;
	struct nfa_edge *e;
	uint32_t ne, ecap;
	uint32_t limit;		/* most states allowed */
	int failed;		/* -ENOMEM or -E2BIG once something failed */
};

void nfa_init(struct nfa *n, uint32_t limit);
void nfa_free(struct nfa *n);
/* A new state, or -1 (n->failed set). Edge helpers ignore -1 ends. */
int32_t nfa_state(struct nfa *n);
void nfa_byte(struct nfa *n, int32_t from, uint8_t lo, uint8_t hi, int32_t to);
void nfa_eps(struct nfa *n, int32_t from, int32_t to);
void nfa_call(struct nfa *n, int32_t from, int32_t entry, int32_t to);
/* from --bytes--> returned state */
int32_t nfa_lit(struct nfa *n, int32_t from, const char *s, size_t len);
/* from --[ \t\n\r]{0,max}--> returned state */
int32_t nfa_ws(struct nfa *n, int32_t from, uint32_t max);

/* ---- DFA (grammar.c) ----------------------------------------------- */

#define DF_ACCEPT 1u
#define DF_RETURN 2u

struct kvc_dfa {
	uint32_t n, n_cls;
	uint8_t cls[256];	/* byte -> class */
	int32_t *next;		/* [state][class] -> state, -1: none */
	uint8_t *flags;
	uint32_t *call_off;	/* calls of s: [call_off[s], call_off[s+1]) */
	int32_t *call_entry, *call_ret;
	int32_t start;
};

/* Subset construction from start, then drops the states from which no
 * end (ACCEPT, or RETURN in a callee) can be reached. -EINVAL with err
 * when the language is empty or a call is ambiguous, -E2BIG, -ENOMEM. */
int dfa_build(const struct nfa *n, int32_t start, uint32_t max_states,
	      struct kvc_dfa *d, char *err, size_t errlen);
void dfa_free(struct kvc_dfa *d);

/* One byte from (state, stack of depth *depth), at most max deep. Returns
 * the new state or -1 (dead); the stack is updated in place. */
int32_t dfa_step(const struct kvc_dfa *d, int32_t s, int32_t *stack,
		 uint32_t *depth, uint32_t max, uint8_t b);

/* ---- specs -> NFA (json_schema.c) ---------------------------------- */

/* Builds the NFA for spec from state 0 (its start) and returns 0, or a
 * negative errno with err. *lazy_tag receives the start tag (TOOL_CALLS,
 * a malloc'd string) or NULL. key receives a malloc'd canonical text of
 * the spec (the cache key). */
int kvc_spec_nfa(const struct kvc_spec *spec, struct nfa *n, char **key,
		 char **start_tag, char *err, size_t errlen);
/* The canonical key alone (cheap: parse and dump), for the cache lookup. */
int kvc_spec_key(const struct kvc_spec *spec, char **key, char *err,
		 size_t errlen);

#endif
