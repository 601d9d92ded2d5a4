/* SPDX-License-Identifier: MIT */
/*
 * kvactl toolwait: tool-wait histograms per tool class and a per-session
 * table, from the maps the toolwait BPF programs pin under
 * /sys/fs/bpf/kvarena/ (or from programs kvactl loads itself when nothing
 * is pinned).
 */
#ifndef KVACTL_TOOLWAIT_H
#define KVACTL_TOOLWAIT_H

#include <stdbool.h>

/* argv[0] is "toolwait"; returns 0 or a negative errno (message printed). */
int kvactl_toolwait(int argc, char **argv, bool json);

#endif /* KVACTL_TOOLWAIT_H */
