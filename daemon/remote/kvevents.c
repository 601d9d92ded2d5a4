// SPDX-License-Identifier: MIT
/*
 * kvevents.c - the KV event publisher of kvevents.h: events packed with
 * msgpack-c as the caller adds them (runs of one chain coalesced), a
 * batch per flush handed to a sending thread that owns the ZeroMQ PUB
 * (and replay ROUTER) sockets.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <msgpack.h>
#include <zmq.h>

#include "kvevents.h"

#define QUEUE_MAX 10000		/* batches waiting for the thread */

struct batch {
	uint64_t seq;
	char *data;
	size_t len;
	struct batch *next;
};

struct kvr_events {
	/* the caller's side */
	msgpack_sbuffer ev;		/* packed events of the open batch */
	msgpack_packer pk;
	uint32_t n_ev;
	uint64_t *st_hash;		/* the BlockStored being coalesced */
	int32_t *st_tok;
	uint32_t st_n, st_cap;
	uint64_t st_parent;
	uint64_t *rm_hash;		/* the BlockRemoved being coalesced */
	uint32_t rm_n, rm_cap;
	uint64_t next_seq;
	uint32_t block_size;
	int32_t dp_rank;
	/* shared with the thread */
	pthread_mutex_t lock;
	struct batch *q_head, *q_tail;
	uint32_t q_n;
	uint64_t dropped;
	int stop;
	int efd;
	/* the thread's */
	pthread_t thread;
	int running;
	void *zctx, *pub, *replay;
	char topic[256];
	size_t topic_len;
	struct batch **ring;		/* replay buffer, oldest overwritten */
	uint32_t ring_cap, ring_n, ring_head;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* tcp endpoints bind only to loopback unless allowed: the events carry
 * token ids, i.e. what users sent */
static int endpoint_ok(const char *ep, int allow_remote)
{
	const char *h;

	if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9))
		return 1;
	if (strncmp(ep, "tcp://", 6))
		return 0;
	h = ep + 6;
	if (allow_remote)
		return 1;
	return !strncmp(h, "127.", 4) || !strncmp(h, "localhost:", 10) ||
	       !strncmp(h, "[::1]:", 6);
}

static void put_be64(unsigned char *b, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		b[i] = (unsigned char)v;
}

static void batch_free(struct batch *b)
{
	if (b) {
		free(b->data);
		free(b);
	}
}

static void send_batch(struct kvr_events *e, struct batch *b)
{
	unsigned char seq[8];

	put_be64(seq, b->seq);
	/* non-blocking: at the high-water mark PUB drops, as vLLM's does */
	zmq_send(e->pub, e->topic, e->topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(e->pub, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(e->pub, b->data, b->len, ZMQ_DONTWAIT);
	if (!e->ring) {
		batch_free(b);
		return;
	}
	if (e->ring_n == e->ring_cap) {
		batch_free(e->ring[e->ring_head]);
		e->ring[e->ring_head] = b;
		e->ring_head = (e->ring_head + 1) % e->ring_cap;
	} else {
		e->ring[(e->ring_head + e->ring_n) % e->ring_cap] = b;
		e->ring_n++;
	}
}

/* A replay request: [identity, empty, start_seq]. Anything else is read
 * to its end and ignored. */
static void serve_replay(struct kvr_events *e)
{
	zmq_msg_t f[3];
	unsigned char end[8];
	int n = 0, more = 1;
	uint64_t start = 0;

	memset(end, 0xff, sizeof(end));	/* -1, big-endian */
	while (more) {
		zmq_msg_t m;
		size_t ml = sizeof(more);

		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, e->replay, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			break;
		}
		zmq_getsockopt(e->replay, ZMQ_RCVMORE, &more, &ml);
		if (n < 3)
			f[n] = m;
		else
			zmq_msg_close(&m);
		n++;
	}
	if (n == 3 && zmq_msg_size(&f[2]) == 8 && zmq_msg_size(&f[1]) == 0) {
		const unsigned char *s = zmq_msg_data(&f[2]);

		for (int i = 0; i < 8; i++)
			start = start << 8 | s[i];
		for (uint32_t i = 0; i < e->ring_n; i++) {
			struct batch *b = e->ring[(e->ring_head + i) % e->ring_cap];
			unsigned char seq[8];

			if (b->seq < start)
				continue;
			put_be64(seq, b->seq);
			zmq_send(e->replay, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]),
				 ZMQ_SNDMORE | ZMQ_DONTWAIT);
			zmq_send(e->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
			zmq_send(e->replay, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
			zmq_send(e->replay, b->data, b->len, ZMQ_DONTWAIT);
		}
		zmq_send(e->replay, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]),
			 ZMQ_SNDMORE | ZMQ_DONTWAIT);
		zmq_send(e->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
		zmq_send(e->replay, end, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
		zmq_send(e->replay, "", 0, ZMQ_DONTWAIT);
	}
	for (int i = 0; i < n && i < 3; i++)
		zmq_msg_close(&f[i]);
}

static void *sender(void *arg)
{
	struct kvr_events *e = arg;

	for (;;) {
		zmq_pollitem_t it[2] = { { NULL, e->efd, ZMQ_POLLIN, 0 },
					 { e->replay, 0, ZMQ_POLLIN, 0 } };
		struct batch *b;
		uint64_t cnt;
		int stop;

		zmq_poll(it, e->replay ? 2 : 1, -1);
		if (it[0].revents & ZMQ_POLLIN)
			(void)!read(e->efd, &cnt, sizeof(cnt));
		if (e->replay && (it[1].revents & ZMQ_POLLIN))
			serve_replay(e);
		pthread_mutex_lock(&e->lock);
		b = e->q_head;
		e->q_head = e->q_tail = NULL;
		e->q_n = 0;
		stop = e->stop;
		pthread_mutex_unlock(&e->lock);
		while (b) {
			struct batch *next = b->next;

			send_batch(e, b);
			b = next;
		}
		if (stop)
			return NULL;
	}
}

int kvr_events_open(const struct kvr_events_params *p, struct kvr_events **ep,
		    char *err, size_t errlen)
{
	struct kvr_events *e;
	int hwm = 100000, linger = 1000;

	*ep = NULL;
	if (!p->endpoint || !endpoint_ok(p->endpoint, p->allow_remote)) {
		set_err(err, errlen,
			"events endpoint '%s': want tcp://127.0.0.1:PORT (tcp beyond loopback "
			"needs allow_remote: the events carry token ids), ipc:// or inproc://",
			p->endpoint ? p->endpoint : "");
		return -EINVAL;
	}
	if (p->replay_endpoint && !endpoint_ok(p->replay_endpoint, p->allow_remote)) {
		set_err(err, errlen, "replay endpoint '%s': the same rules as the endpoint's",
			p->replay_endpoint);
		return -EINVAL;
	}
	if (!p->block_size || (p->topic && strlen(p->topic) >= sizeof(e->topic))) {
		set_err(err, errlen, "events: bad block size or topic");
		return -EINVAL;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->efd = -1;
	pthread_mutex_init(&e->lock, NULL);
	msgpack_sbuffer_init(&e->ev);
	msgpack_packer_init(&e->pk, &e->ev, msgpack_sbuffer_write);
	e->block_size = p->block_size;
	e->dp_rank = p->dp_rank;
	snprintf(e->topic, sizeof(e->topic), "%s", p->topic ? p->topic : "");
	e->topic_len = strlen(e->topic);
	e->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	e->zctx = zmq_ctx_new();
	if (e->efd < 0 || !e->zctx)
		goto fail_sys;
	e->pub = zmq_socket(e->zctx, ZMQ_PUB);
	if (!e->pub)
		goto fail_sys;
	zmq_setsockopt(e->pub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(e->pub, ZMQ_LINGER, &linger, sizeof(linger));
	if (zmq_bind(e->pub, p->endpoint)) {
		set_err(err, errlen, "events: bind %s: %s", p->endpoint, zmq_strerror(errno));
		goto fail;
	}
	if (p->replay_endpoint) {
		e->ring_cap = p->replay_batches ? p->replay_batches : 1000;
		e->ring = calloc(e->ring_cap, sizeof(*e->ring));
		e->replay = zmq_socket(e->zctx, ZMQ_ROUTER);
		if (!e->ring || !e->replay)
			goto fail_sys;
		zmq_setsockopt(e->replay, ZMQ_LINGER, &linger, sizeof(linger));
		if (zmq_bind(e->replay, p->replay_endpoint)) {
			set_err(err, errlen, "events: bind %s: %s", p->replay_endpoint,
				zmq_strerror(errno));
			goto fail;
		}
	}
	if (pthread_create(&e->thread, NULL, sender, e))
		goto fail_sys;
	e->running = 1;
	*ep = e;
	return 0;
fail_sys:
	set_err(err, errlen, "events: %s", strerror(errno ? errno : ENOMEM));
fail:
	kvr_events_close(e);
	return -EIO;
}

/* ---- building batches (the caller's thread) -------------------------- */

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
	uint32_t c = *cap ? *cap : 16;
	void *np;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	np = realloc(*p, (size_t)c * elem);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = c;
	return 0;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

static void end_stored(struct kvr_events *e)
{
	msgpack_packer *pk = &e->pk;
	uint32_t i;

	if (!e->st_n)
		return;
	msgpack_pack_array(pk, 8);
	pack_str(pk, "BlockStored");
	msgpack_pack_array(pk, e->st_n);
	for (i = 0; i < e->st_n; i++)
		msgpack_pack_uint64(pk, e->st_hash[i]);
	if (e->st_parent)
		msgpack_pack_uint64(pk, e->st_parent);
	else
		msgpack_pack_nil(pk);
	msgpack_pack_array(pk, e->st_n * e->block_size);
	for (i = 0; i < e->st_n * e->block_size; i++)
		msgpack_pack_int32(pk, e->st_tok[i]);
	msgpack_pack_uint32(pk, e->block_size);
	msgpack_pack_nil(pk);	/* lora_id: kvarenad serves no adapters */
	msgpack_pack_nil(pk);	/* medium: the engine's own (only) tier */
	msgpack_pack_nil(pk);	/* lora_name */
	e->n_ev++;
	e->st_n = 0;
}

static void end_removed(struct kvr_events *e)
{
	msgpack_packer *pk = &e->pk;
	uint32_t i;

	if (!e->rm_n)
		return;
	msgpack_pack_array(pk, 3);
	pack_str(pk, "BlockRemoved");
	msgpack_pack_array(pk, e->rm_n);
	for (i = 0; i < e->rm_n; i++)
		msgpack_pack_uint64(pk, e->rm_hash[i]);
	msgpack_pack_nil(pk);
	e->n_ev++;
	e->rm_n = 0;
}

int kvr_events_stored(struct kvr_events *e, uint64_t hash, uint64_t parent,
		      const int32_t *tokens)
{
	uint32_t bs = e->block_size;

	end_removed(e);
	/* a block continuing the chain being stored joins its event */
	if (e->st_n && parent != e->st_hash[e->st_n - 1])
		end_stored(e);
	if (e->st_n == e->st_cap) {
		uint32_t cap = e->st_cap ? e->st_cap * 2 : 16;
		uint64_t *nh = realloc(e->st_hash, cap * sizeof(*nh));
		int32_t *nt;

		if (!nh)
			return -ENOMEM;
		e->st_hash = nh;
		nt = realloc(e->st_tok, (size_t)cap * bs * sizeof(*nt));
		if (!nt)
			return -ENOMEM;
		e->st_tok = nt;
		e->st_cap = cap;
	}
	if (!e->st_n)
		e->st_parent = parent;
	e->st_hash[e->st_n] = hash;
	memcpy(e->st_tok + (size_t)e->st_n * bs, tokens, (size_t)bs * sizeof(*tokens));
	e->st_n++;
	return 0;
}

int kvr_events_removed(struct kvr_events *e, uint64_t hash)
{
	end_stored(e);
	if (grow((void **)&e->rm_hash, &e->rm_cap, e->rm_n + 1, sizeof(*e->rm_hash)))
		return -ENOMEM;
	e->rm_hash[e->rm_n++] = hash;
	return 0;
}

int kvr_events_cleared(struct kvr_events *e)
{
	end_stored(e);
	end_removed(e);
	msgpack_pack_array(&e->pk, 1);
	pack_str(&e->pk, "AllBlocksCleared");
	e->n_ev++;
	return 0;
}

int kvr_events_flush(struct kvr_events *e)
{
	msgpack_sbuffer out;
	msgpack_packer pk;
	struct timespec ts;
	struct batch *b;
	uint64_t one = 1;
	int drop;

	end_stored(e);
	end_removed(e);
	if (!e->n_ev)
		return 0;
	clock_gettime(CLOCK_REALTIME, &ts);
	msgpack_sbuffer_init(&out);
	msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_double(&pk, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
	msgpack_pack_array(&pk, e->n_ev);
	msgpack_sbuffer_write(&out, e->ev.data, e->ev.size);
	msgpack_pack_int32(&pk, e->dp_rank);
	e->n_ev = 0;
	msgpack_sbuffer_clear(&e->ev);
	b = calloc(1, sizeof(*b));
	if (!b || !out.data) {
		free(b);
		msgpack_sbuffer_destroy(&out);
		return -ENOMEM;
	}
	b->seq = e->next_seq++;
	b->len = out.size;
	b->data = msgpack_sbuffer_release(&out);
	pthread_mutex_lock(&e->lock);
	drop = e->q_n >= QUEUE_MAX;
	if (drop) {
		e->dropped++;
	} else {
		if (e->q_tail)
			e->q_tail->next = b;
		else
			e->q_head = b;
		e->q_tail = b;
		e->q_n++;
	}
	pthread_mutex_unlock(&e->lock);
	if (drop)
		batch_free(b);
	else
		(void)!write(e->efd, &one, sizeof(one));
	return 0;
}

uint64_t kvr_events_next_seq(const struct kvr_events *e)
{
	return e->next_seq;
}

uint64_t kvr_events_dropped(const struct kvr_events *e)
{
	return e->dropped;
}

void kvr_events_close(struct kvr_events *e)
{
	uint64_t one = 1;

	if (!e)
		return;
	if (e->running) {
		kvr_events_flush(e);
		pthread_mutex_lock(&e->lock);
		e->stop = 1;
		pthread_mutex_unlock(&e->lock);
		(void)!write(e->efd, &one, sizeof(one));
		pthread_join(e->thread, NULL);
	}
	while (e->q_head) {
		struct batch *b = e->q_head;

		e->q_head = b->next;
		batch_free(b);
	}
	for (uint32_t i = 0; i < e->ring_n; i++)
		batch_free(e->ring[(e->ring_head + i) % e->ring_cap]);
	free(e->ring);
	if (e->pub)
		zmq_close(e->pub);
	if (e->replay)
		zmq_close(e->replay);
	if (e->zctx)
		zmq_ctx_term(e->zctx);
	if (e->efd >= 0)
		close(e->efd);
	msgpack_sbuffer_destroy(&e->ev);
	free(e->st_hash);
	free(e->st_tok);
	free(e->rm_hash);
	pthread_mutex_destroy(&e->lock);
	free(e);
}
