/* SPDX-License-Identifier: MIT */
/*
 * xfer.h - KV from arena to arena across hosts: one UCX context and worker
 * with the local arena mapping registered (ucp_mem_map), endpoints to
 * peers whose arenas were registered the same way, and one-sided
 * ucp_put_nbx / ucp_get_nbx straight between blocks (no staging copy).
 *
 * What a peer needs to reach this arena (worker address, rkey, the
 * mapping's base and length) travels as one opaque blob, over the
 * authenticated control channel (chan.h); kvr_peer_connect() checks it
 * before use. Every put/get is bounds-checked against both arenas before
 * it is issued: a transfer never leaves the two registrations.
 *
 * Single-threaded: one thread owns a kvr_xfer and its peers. Transfers
 * are issued non-blocking and completed together by kvr_peer_flush()
 * (remote completion for puts, data landed for gets); a peer that fails
 * (UCX's peer error handling: connection lost, keepalive) fails every
 * pending and later operation with -ECONNRESET.
 *
 * Errors: 0 or a negative errno; functions that can fail on what a peer
 * sent take an error buffer.
 */
#ifndef KVR_XFER_H
#define KVR_XFER_H

#include <stddef.h>
#include <stdint.h>

struct kvr_xfer;
struct kvr_peer;

struct kvr_xfer_params {
	void *base;			/* the local arena mapping */
	size_t len;
	const char *tls;		/* UCX_TLS for this context, or NULL */
	const char *net_devices;	/* UCX_NET_DEVICES, or NULL */
};

int kvr_xfer_create(const struct kvr_xfer_params *p, struct kvr_xfer **xp,
		    char *err, size_t errlen);
/* Closes every peer (forced), unregisters, frees. NULL is allowed. */
void kvr_xfer_destroy(struct kvr_xfer *x);

/* The blob a peer passes to kvr_peer_connect(): malloc'd, free() it. */
int kvr_xfer_info(struct kvr_xfer *x, void **blob, size_t *len);
#define KVR_INFO_MAX (64u << 10)	/* a blob larger than this is refused */

/* The transports UCX chose for this context, for logs ("tcp" ...). */
const char *kvr_xfer_transports(struct kvr_xfer *x);

/* An fd that becomes readable when the worker has events (poll it; then
 * call kvr_xfer_progress). */
int kvr_xfer_fd(struct kvr_xfer *x);
/* Progresses until idle and re-arms the fd. Returns >0 when something
 * was progressed. The passive side of one-sided transfers over software
 * RMA (TCP) must call this for the peer's puts and gets to land. */
int kvr_xfer_progress(struct kvr_xfer *x);

/* Connects to the peer whose blob this is. The peer must not progress
 * its worker (kvr_xfer_progress) from sending the blob until this side
 * tells it, after this returns, that it connected: see xfer.c on UCX 1.13. */
int kvr_peer_connect(struct kvr_xfer *x, const void *blob, size_t len,
		     struct kvr_peer **pp, char *err, size_t errlen);
/* Force-closes the endpoint: pending operations end in error and nothing
 * more can land in the local arena through it. */
void kvr_peer_close(struct kvr_peer *p);

/* Issue len bytes: local arena offset -> peer arena offset (put), or
 * peer -> local (get). -ERANGE outside either mapping; -ECONNRESET once
 * the peer failed. Completion: kvr_peer_flush(). */
int kvr_peer_put(struct kvr_peer *p, uint64_t local_off, uint64_t remote_off,
		 size_t len);
int kvr_peer_get(struct kvr_peer *p, uint64_t local_off, uint64_t remote_off,
		 size_t len);

/* Waits until every operation issued so far completed (puts: at the
 * peer). idle, if not NULL, is called about every 50 ms while waiting
 * (heartbeats); its non-zero return aborts the wait with that value.
 * 0, -ETIMEDOUT (timeout_ms, < 0: none), -ECONNRESET, or idle's code. */
int kvr_peer_flush(struct kvr_peer *p, int timeout_ms, int (*idle)(void *),
		   void *arg);
int kvr_peer_failed(const struct kvr_peer *p);
/* Bytes put and got through this peer. */
uint64_t kvr_peer_bytes(const struct kvr_peer *p);

#endif
