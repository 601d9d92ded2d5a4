/* SPDX-License-Identifier: MIT */
/*
 * kvactl internals: the subcommands (one file each), their usage texts,
 * and the helpers they share (argument checks, JSON through jansson,
 * sizes, durations).
 */
#ifndef KVACTL_H
#define KVACTL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <jansson.h>

#include "kvarena.h"

/* Output modes: -j and -p. */
enum { KVACTL_TEXT = 0, KVACTL_JSON = 1, KVACTL_PRETTY = 2 };

struct kvactl {
	int json;			/* KVACTL_TEXT, _JSON or _PRETTY */
	struct kva_nl *nl;		/* opened by kvactl_nl() */
};

/* Each subcommand: argv[0] is the object's name; returns the exit status. */
int kvactl_arena(struct kvactl *k, int argc, char **argv);
int kvactl_session(struct kvactl *k, int argc, char **argv);
int kvactl_policy(struct kvactl *k, int argc, char **argv);
int kvactl_monitor(struct kvactl *k, int argc, char **argv);
extern const char kvactl_arena_usage[];
extern const char kvactl_session_usage[];
extern const char kvactl_policy_usage[];
extern const char kvactl_monitor_usage[];

/* The JSON schema of every -j object (kvactl help json). */
extern const char kvactl_json_schema[];

/* Open the netlink family (after arguments are checked): 0, or 1 with the
 * reason printed. */
int kvactl_nl(struct kvactl *k);
/* "help", "-h" or "--help". */
bool kvactl_is_help(const char *arg);
/* A help request anywhere in an object's arguments (see kvactl.c). */
bool kvactl_wants_help(int argc, char **argv);
/* Print a usage to stderr; returns 2 (the usage-error exit status). */
int kvactl_usage_error(const char *usage);
/* Print v (reference stolen) as one line of JSON, or indented with -p. */
void kvactl_json_print(const struct kvactl *k, json_t *v);
/* A u64 as a JSON integer; at or above 2^63, its decimal digits as a
 * string (jansson's integers are signed 64-bit). */
json_t *kvactl_ju64(uint64_t v);
/* "64MiB", "256KiB", "12345B": exact, the largest unit that divides. */
const char *kvactl_size(uint64_t bytes, char *buf, size_t len);
/* Nanoseconds as "1.204s", "35ms", "12us". */
const char *kvactl_dur(uint64_t ns, char *buf, size_t len);
uint64_t kvactl_now_ns(void);
/* Print "kvactl: <what>: <error>[: <extack>]" and return 1. */
int kvactl_fail(struct kvactl *k, const char *what, int err);
/* Decimal (or 0x hex) digits only, no sign or blanks, within u32. */
int kvactl_parse_u32(const char *s, uint32_t *out);

#endif /* KVACTL_H */
