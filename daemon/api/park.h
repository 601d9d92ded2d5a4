/* SPDX-License-Identifier: MIT */
/*
 * park.h - a connection parked while its generation has nothing to send.
 *
 * The HTTP server runs a few event-loop threads (libmicrohttpd's thread
 * pool over epoll) and no callback of theirs ever waits: a request whose
 * generation has no news suspends its connection (MHD_suspend_connection)
 * and returns; the connection is resumed (MHD_resume_connection, from any
 * thread) when one of these happens:
 *
 *   - an event is queued on one of its jobs (kvd_job_set_notify, called
 *     from the scheduler's thread),
 *   - the client hangs up (one epoll set of the parked connections'
 *     sockets, watched by the parker's thread: libmicrohttpd does not look
 *     at a suspended connection),
 *   - its deadline passes (an SSE keep-alive is due, a cancelled job did
 *     not end in time: the parker's thread, once a second),
 *   - the server stops (park_release_all).
 *
 * The protocol between the loop thread and the wakers is park_sleep()'s:
 * it suspends only when nothing woke the park since the consumer last
 * drained its jobs, so no wake-up is lost.
 */
#ifndef KVD_API_PARK_H
#define KVD_API_PARK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

struct gen;
struct parker;

struct park {
	struct parker *pk;		/* NULL: never attached */
	struct MHD_Connection *c;
	struct gen *g;			/* whose jobs notify */
	int fd;				/* the connection's socket */
	uint32_t no;			/* this attachment's number (epoll data) */
	pthread_mutex_t lock;		/* suspended, pending */
	int suspended;			/* MHD_suspend_connection'ed, not resumed */
	int pending;			/* woken while not suspended */
	uint64_t deadline_ns;		/* CLOCK_MONOTONIC; 0: none (atomic) */
	struct park *next, **prev;	/* the parker's list */
};

/* The parker's thread and epoll set; NULL with err filled. */
struct parker *parker_new(char *err, size_t errlen);
/* After MHD_stop_daemon: nothing is parked any more. */
void parker_free(struct parker *pk);

/* From the request's first generation on: g's jobs wake p, and so does a
 * hang-up on fd. Events already queued wake it at once. */
void park_attach(struct park *p, struct parker *pk, struct MHD_Connection *c, int fd,
		 struct gen *g);
/* When the request ends (libmicrohttpd's completion callback): after it,
 * nothing touches p. */
void park_detach(struct park *p);
/*
 * From a libmicrohttpd callback of p's connection, after draining every
 * job: 1 the connection is suspended (return, a wake-up resumes it);
 * 0 something woke p meanwhile (drain again); -1 the server is stopping
 * (end the request). deadline_ns: wake anyway then (0: never).
 */
int park_sleep(struct park *p, uint64_t deadline_ns);
/* Wake p from any thread (a job's notify). */
void park_wake(void *p);
/* Stopping: every parked connection is resumed and none parks again. */
void park_release_all(struct parker *pk);
/* Connections parked now (for /metrics). */
unsigned long parker_parked(struct parker *pk);

#endif
