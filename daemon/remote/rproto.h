/* SPDX-License-Identifier: MIT */
/*
 * rproto.h - the messages a remote worker host and the orchestrator's
 * link process add to proto.h's, on the authenticated channel (chan.h).
 *
 *   remote host (kvarenad --worker-of)      link (kvarenad --remote-link)
 *     JOIN  ------------------------------>   model fingerprint, roles it takes
 *           <------------------------------   WELCOME: HELLO (role, geometry),
 *                                             limits, the arena's UCX blob
 *                                             (or REFUSE: why, and it stops)
 *     READY ------------------------------>   (proto.h's struct kvd_ready)
 *           <------------------------------   STEP (proto.h, A's block ids)
 *     RESULT ----------------------------->   after its KV landed in A's blocks
 *     PING / PONG either way, any time
 *
 * Everything fixed-width little-endian; strings NUL-padded and checked
 * for a NUL before use; the UCX blob is checked by xfer.c.
 */
#ifndef KVR_RPROTO_H
#define KVR_RPROTO_H

#include <stdint.h>

#include "proto.h"

#define KVR_REMOTE_VERSION 1

enum kvr_msg_type {
	KVR_MSG_JOIN = 64,	/* host -> link: struct kvr_join */
	KVR_MSG_WELCOME,	/* link -> host: struct kvr_welcome + blob */
	KVR_MSG_REFUSE,		/* link -> host: struct kvr_refuse */
	KVR_MSG_PING,		/* either way: uint64 nonce */
	KVR_MSG_PONG,		/* the nonce back */
};

#define KVR_ROLE_ANY 3u		/* kvr_join.roles: 1 << (role - 1) bits */

/* A model file's identity: its size and SHA-256 over its first and last
 * MiB (header, metadata, and tensor bytes at both ends). It catches a
 * different model or quantization; it is no defence against a peer that
 * holds the key (nothing is, see Documentation/remote.md). */
struct kvr_model_id {
	uint64_t size;
	uint8_t digest[32];
};

struct kvr_join {
	uint32_t version;		/* KVR_REMOTE_VERSION */
	uint32_t roles;			/* roles this host takes */
	struct kvr_model_id model;
	uint32_t pid;
	uint32_t pad;
	char host[64];			/* its name, for logs */
};

struct kvr_welcome {
	struct kvd_hello hello;		/* role, copy_mode 0, the arena's geometry */
	struct kvr_model_id model;
	uint32_t max_ctx;		/* longest sequence a step may carry */
	uint32_t max_batch;		/* sequences per decode step */
	uint32_t heartbeat_ms;		/* PING at least this often */
	uint32_t timeout_ms;		/* silent this long: the other end is gone */
	char tool_open[32], tool_close[32];	/* structured decoding's tags */
	uint32_t blob_len;		/* the UCX blob (xfer.h) follows */
	uint32_t pad;
};

struct kvr_refuse {
	char why[192];
};

/* Model fingerprint of a file; 0 or -errno. */
int kvr_model_id(const char *path, struct kvr_model_id *id);

#endif
