// SPDX-License-Identifier: MIT
/*
 * test_kvevents.c - the KV event publisher (daemon/remote/kvevents.h)
 * against a real ZeroMQ subscriber (tests/remote/kv_subscriber.py:
 * python3-zmq, python3-msgpack), which decodes the batches as the routers
 * that read vLLM's stream do and prints them as JSON.
 *
 * Checked: a chain of stored blocks becomes one BlockStored (hashes,
 * parent, every token id, block size), another chain a second one, a
 * removal and a clear follow in order; batches are numbered 0, 1, ...
 * under the configured topic; a subscriber that joins late gets the
 * earlier batches by replay; endpoints beyond loopback need allow_remote.
 *
 *   test_kvevents PATH/TO/kv_subscriber.py
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "kvevents.h"
#include "subproc.h"

static int fails;
#define CHECK(c, ...) do { if (!(c)) { fails++; fprintf(stderr, "FAIL %s:%d: ", \
	__FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static uint64_t hash_at(json_t *a, size_t i)
{
	const char *s = json_string_value(json_array_get(a, i));

	return s ? strtoull(s, NULL, 10) : 0;
}

static json_t *next_batch(struct subproc *s)
{
	static char line[1 << 20];
	json_error_t je;

	if (!subproc_line(s, line, sizeof(line), 10000))
		return NULL;
	if (getenv("KVR_TEST_VERBOSE"))
		fprintf(stderr, "batch: %.300s\n", line);
	return json_loads(line, 0, &je);
}

int main(int argc, char **argv)
{
	struct kvr_events_params p = { 0 };
	struct kvr_events *e = NULL;
	struct subproc sub;
	char ep[64], rep[64], err[256], line[256];
	int32_t tok[3][4] = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } };
	int32_t other[4] = { 100, 101, 102, 103 };
	json_t *b, *evs, *ev;
	int port = 20000 + getpid() % 20000;

	if (argc < 2)
		return 2;
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
	snprintf(rep, sizeof(rep), "tcp://127.0.0.1:%d", port + 1);

	/* the endpoint policy */
	p.block_size = 4;
	p.topic = "kv@test@model";
	p.endpoint = "tcp://0.0.0.0:5557";
	CHECK(kvr_events_open(&p, &e, err, sizeof(err)) == -EINVAL && strstr(err, "allow_remote"),
	      "a wildcard bind needs allow_remote: %s", err);
	p.endpoint = "udp://127.0.0.1:5557";
	CHECK(kvr_events_open(&p, &e, err, sizeof(err)) == -EINVAL, "udp refused");
	p.endpoint = ep;
	p.replay_endpoint = rep;
	CHECK(!kvr_events_open(&p, &e, err, sizeof(err)), "open: %s", err);
	if (!e)
		return 1;

	/* batch 0, before anyone subscribes: only replay brings it */
	kvr_events_cleared(e);
	kvr_events_flush(e);
	CHECK(kvr_events_next_seq(e) == 1, "one batch sent");
	{
		char *av[] = { "/usr/bin/python3", argv[1], ep, "--replay", rep, "--topic",
			       "kv@", NULL };

		CHECK(!subproc_start(&sub, av), "start the subscriber");
	}
	CHECK(subproc_line(&sub, line, sizeof(line), 20000) && !strcmp(line, "ready"),
	      "subscriber ready (%s)", line);
	b = next_batch(&sub);
	CHECK(b && json_integer_value(json_object_get(b, "seq")) == 0 &&
	      json_is_null(json_object_get(b, "topic")) &&
	      json_integer_value(json_object_get(b, "dp_rank")) == 0,
	      "batch 0 by replay (no topic frame in replies), rank");
	ev = json_array_get(json_object_get(b, "events"), 0);
	CHECK(ev && !strcmp(json_string_value(json_object_get(ev, "type")), "AllBlocksCleared"),
	      "batch 0 is AllBlocksCleared");
	json_decref(b);

	/* batch 1: a chain of three blocks, then another chain, then two
	 * removals and a clear */
	kvr_events_stored(e, 0x1111, 0, tok[0]);
	kvr_events_stored(e, 0x2222, 0x1111, tok[1]);
	kvr_events_stored(e, 0xfffffffffffffff3ull, 0x2222, tok[2]);
	kvr_events_stored(e, 0x4444, 0x1111, other);
	kvr_events_removed(e, 0x2222);
	kvr_events_removed(e, 0xfffffffffffffff3ull);
	kvr_events_cleared(e);
	kvr_events_flush(e);
	kvr_events_flush(e);	/* nothing queued: no batch */
	b = next_batch(&sub);
	CHECK(b && json_integer_value(json_object_get(b, "seq")) == 1 &&
	      !strcmp(json_string_value(json_object_get(b, "topic")), "kv@test@model"),
	      "batch 1 live, under the topic");
	evs = json_object_get(b, "events");
	CHECK(json_array_size(evs) == 4, "4 events (%zu)", json_array_size(evs));
	ev = json_array_get(evs, 0);
	CHECK(ev && !strcmp(json_string_value(json_object_get(ev, "type")), "BlockStored") &&
	      json_array_size(json_object_get(ev, "block_hashes")) == 3 &&
	      json_is_null(json_object_get(ev, "parent")) &&
	      json_integer_value(json_object_get(ev, "block_size")) == 4 &&
	      json_array_size(json_object_get(ev, "token_ids")) == 12,
	      "the first chain: one event of 3 blocks, 12 tokens, no parent");
	if (ev) {
		json_t *t = json_object_get(ev, "token_ids");
		json_t *h = json_object_get(ev, "block_hashes");

		for (int i = 0; i < 12; i++)
			CHECK(json_integer_value(json_array_get(t, (size_t)i)) == i + 1,
			      "token %d", i);
		CHECK(hash_at(h, 0) == 0x1111 && hash_at(h, 1) == 0x2222 &&
		      hash_at(h, 2) == 0xfffffffffffffff3ull, "hashes, one above 2^63");
	}
	ev = json_array_get(evs, 1);
	CHECK(ev && strtoull(json_string_value(json_object_get(ev, "parent")), NULL, 10) ==
			    0x1111 &&
	      json_integer_value(json_array_get(json_object_get(ev, "token_ids"), 0)) == 100,
	      "the second chain: its own event, its parent");
	ev = json_array_get(evs, 2);
	CHECK(ev && !strcmp(json_string_value(json_object_get(ev, "type")), "BlockRemoved") &&
	      json_array_size(json_object_get(ev, "block_hashes")) == 2,
	      "two removals, one event");
	ev = json_array_get(evs, 3);
	CHECK(ev && !strcmp(json_string_value(json_object_get(ev, "type")), "AllBlocksCleared"),
	      "then the clear");
	json_decref(b);

	/* many batches in a row arrive in order, none lost */
	for (int i = 0; i < 200; i++) {
		kvr_events_stored(e, 0x10000 + (uint64_t)i, 0, tok[0]);
		kvr_events_flush(e);
	}
	for (int i = 0; i < 200; i++) {
		b = next_batch(&sub);
		CHECK(b && json_integer_value(json_object_get(b, "seq")) == 2 + i, "batch %d", 2 + i);
		json_decref(b);
		if (!b)
			break;
	}
	kvr_events_close(e);
	CHECK(subproc_stop(&sub) == 0, "the subscriber decoded everything");
	printf("test_kvevents: %s (%d failures)\n", fails ? "FAIL" : "PASS", fails);
	return fails ? 1 : 0;
}
