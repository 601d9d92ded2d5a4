/* SPDX-License-Identifier: MIT */
/*
 * kvactl internals: the subcommands (one file each) and the small output
 * helpers they share (JSON strings, sizes, durations).
 */
#ifndef KVACTL_H
#define KVACTL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kvarena.h"

struct kvactl {
	bool json;
	struct kva_nl *nl;
};

int kvactl_arena(struct kvactl *k, int argc, char **argv);
int kvactl_session(struct kvactl *k, int argc, char **argv);
int kvactl_policy(struct kvactl *k, int argc, char **argv);
int kvactl_monitor(struct kvactl *k, int argc, char **argv);

/* A JSON string literal, escaped. */
void kvactl_json_str(const char *s);
/* "64MiB", "256KiB", "12345B": exact, the largest unit that divides. */
const char *kvactl_size(uint64_t bytes, char *buf, size_t len);
/* Nanoseconds as "1.204s", "35ms", "12us". */
const char *kvactl_dur(uint64_t ns, char *buf, size_t len);
uint64_t kvactl_now_ns(void);
/* Print "kvactl: <what>: <error>[: <extack>]" and return 1. */
int kvactl_fail(struct kvactl *k, const char *what, int err);
int kvactl_parse_u32(const char *s, uint32_t *out);

#endif /* KVACTL_H */
