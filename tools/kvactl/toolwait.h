/* SPDX-License-Identifier: MIT */
/*
 * kvactl toolwait: tool-wait histograms per tool class and a per-session
 * table, from the maps the toolwait BPF programs pin under
 * /sys/fs/bpf/kvarena/ (or from programs kvactl loads itself when nothing
 * is pinned).
 */
#ifndef KVACTL_TOOLWAIT_H
#define KVACTL_TOOLWAIT_H

extern const char kvactl_toolwait_usage[];

/*
 * argv[0] is "toolwait"; json: 0 text, 1 JSON, 2 indented JSON.  Returns
 * the exit status: 0, 1 (failed, message printed) or 2 (usage error).
 */
int kvactl_toolwait(int argc, char **argv, int json);

struct kva_toolwait_hist;
/*
 * An interval's histogram: h minus the previous snapshot, or h itself if
 * any count went down (the histograms were cleared meanwhile; returns 1).
 */
int kvactl_toolwait_delta(struct kva_toolwait_hist *h,
			  const struct kva_toolwait_hist *prev);

#endif /* KVACTL_TOOLWAIT_H */
