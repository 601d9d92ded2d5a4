/* SPDX-License-Identifier: MIT */
/*
 * hooks.h - where the orchestrator (daemon/kvarenad/) calls into the
 * remote room, each a line at its call site:
 *
 *   core.c     kvd_remote_init / kvd_remote_fini: the remote listening
 *              socket, the KV event publisher
 *   workers.c  remote slots: kvd_remote_slots() more worker slots, whose
 *              process is a link (kvd_remote_exec, in the forked child)
 *   sched.c    kvd_worker_joinable(): a remote slot waits for its host
 *              to join, for a while, before requests stop waiting for it
 *   prefix.c   kvd_kvev_stored / kvd_kvev_removed / kvd_kvev_flush: the
 *              prefix cache's block events
 *   metrics.c  kvd_router_metrics(): the load metrics under the names the
 *              routers read
 *
 * All are called with the orchestrator's lock held, from its threads.
 */
#ifndef KVR_HOOKS_H
#define KVR_HOOKS_H

#include <stddef.h>
#include <stdint.h>

struct kvd;
struct kvd_worker;
struct kva_arena_info;

int kvd_remote_init(struct kvd *d, char *err, size_t errlen);
void kvd_remote_fini(struct kvd *d);

/* Remote slots of a role (KVD_ROLE_*) the configuration asks for. */
uint32_t kvd_remote_slots(const struct kvd *d, uint32_t role);
/* In the child of fork(), with its end of the socketpair: becomes the
 * link process; returns only on error. */
void kvd_remote_exec(struct kvd *d, struct kvd_worker *w, int sock);
/* 0 once a remote slot has had no host joined for [remote] join_grace_s
 * (requests then fail instead of waiting); 1 otherwise and for local ones. */
int kvd_worker_joinable(struct kvd *d, struct kvd_worker *w);

void kvd_kvev_stored(struct kvd *d, uint64_t hash, uint64_t parent, const int32_t *tokens);
void kvd_kvev_removed(struct kvd *d, uint64_t hash);
void kvd_kvev_flush(struct kvd *d);

/* Appends the routers' gauges (vLLM's and Dynamo's names) to buf;
 * returns the bytes it would take (snprintf's convention). */
int kvd_router_metrics(struct kvd *d, char *buf, size_t len, uint32_t waiting,
		       uint32_t running, const struct kva_arena_info *ai);

#endif
