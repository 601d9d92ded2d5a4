/* SPDX-License-Identifier: MIT */
/*
 * chan.h - the control channel between an orchestrator and a remote
 * worker host: TCP, and on it TLS 1.3 authenticated by a pre-shared key
 * (OpenSSL, PSK with (EC)DHE: both ends prove they hold the key, the
 * traffic is encrypted, a recorded session cannot be decrypted later).
 * Nothing is read from a connection before its handshake completed.
 *
 * The key file (Documentation/remote.md): at least 32 bytes of secret,
 * readable by its owner only (refused when group or others may read it);
 * the TLS key is SHA-256 over a label and the file's bytes (a trailing
 * newline dropped), so any long random string works (`openssl rand -hex 32`).
 *
 * Messages are proto.h's framing (struct kvd_msg_hdr + payload, at most
 * KVD_MSG_MAX): the same messages the orchestrator exchanges with local
 * workers, plus remote.h's. A peer that stops sending mid-message, or
 * stops reading, fails the call after the channel's I/O timeout.
 *
 * Errors: 0 or a negative errno, with a message where a peer or a file
 * can be at fault.
 */
#ifndef KVR_CHAN_H
#define KVR_CHAN_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

struct kvr_chan;

struct kvr_psk {
	uint8_t key[32];
};

#define KVR_PSK_MIN_BYTES 32

int kvr_psk_load(const char *path, struct kvr_psk *k, char *err, size_t errlen);

/* A listening TCP socket on HOST:PORT (numeric or a name; "*:PORT" or
 * ":PORT" for every address). */
int kvr_listen(const char *hostport, int *fdp, char *err, size_t errlen);

/* Accepts one connection on lfd and completes the TLS handshake within
 * timeout_ms; io_timeout_ms bounds every later read and write. A client
 * without the key, or not speaking TLS, is refused (-EACCES / -EPROTO). */
int kvr_chan_accept(int lfd, const struct kvr_psk *k, int timeout_ms, int io_timeout_ms,
		    struct kvr_chan **cp, char *err, size_t errlen);
int kvr_chan_connect(const char *hostport, const struct kvr_psk *k, int timeout_ms,
		     int io_timeout_ms, struct kvr_chan **cp, char *err, size_t errlen);
void kvr_chan_close(struct kvr_chan *c);

int kvr_chan_send(struct kvr_chan *c, uint16_t type, const struct kvd_iov *iov, int n);
/* 1 with *type, *len (payload in *buf, grown as needed; free() it), 0 on
 * orderly close, or -errno (-EPROTO bad header, -EMSGSIZE over
 * KVD_MSG_MAX, -ETIMEDOUT the peer stalled). */
int kvr_chan_recv(struct kvr_chan *c, uint16_t *type, void **buf, size_t *cap,
		  size_t *len);
/* Writes bytes as they are (no framing). */
int kvr_chan_write(struct kvr_chan *c, const void *buf, size_t len);

/* The socket, to poll for input; kvr_chan_pending() > 0 means bytes are
 * already decrypted and waiting, so do not wait in poll() first. */
int kvr_chan_fd(const struct kvr_chan *c);
int kvr_chan_pending(struct kvr_chan *c);
/* "ADDRESS:PORT" of the other end. */
const char *kvr_chan_peer(const struct kvr_chan *c);

#endif
