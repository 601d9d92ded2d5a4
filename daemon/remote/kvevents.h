/* SPDX-License-Identifier: MIT */
/*
 * kvevents.h - the prefix cache's block events for the KV-aware routers
 * that exist (llm-d's KV-cache scheduler, Dynamo's KV router), in the
 * format of vLLM's KV-event publisher: ZeroMQ PUB, each message three
 * frames [topic, sequence (8 bytes, big-endian), payload], the payload a
 * msgpack EventBatch [ts, [event...], data_parallel_rank] whose events
 * are arrays tagged by their first element:
 *
 *   ["BlockStored", [hash...], parent_hash | nil, [token_id...],
 *    block_size, lora_id (nil), medium (nil), lora_name (nil)]
 *   ["BlockRemoved", [hash...], medium (nil)]
 *   ["AllBlocksCleared"]
 *
 * Documentation/remote.md has the field-by-field layout and where it comes
 * from. Optionally a ROUTER socket answers replay requests as vLLM's does
 * (a client sends [empty, start_seq]; it gets [empty, seq, payload] per
 * buffered batch from start_seq on, then [empty, -1, empty]).
 *
 * The caller (the orchestrator's scheduler thread) adds events and
 * flushes them as one batch; consecutive stored blocks of one chain
 * become one BlockStored event. A thread of the publisher's own sends the
 * batches and serves replays, so a slow subscriber never blocks the
 * caller (PUB drops at its high-water mark, as vLLM's does).
 */
#ifndef KVR_KVEVENTS_H
#define KVR_KVEVENTS_H

#include <stddef.h>
#include <stdint.h>

struct kvr_events;

struct kvr_events_params {
	const char *endpoint;		/* "tcp://127.0.0.1:5557" (bind) */
	const char *replay_endpoint;	/* NULL: no replay */
	const char *topic;		/* first frame, "" allowed */
	uint32_t block_size;		/* tokens per block */
	int32_t dp_rank;		/* data_parallel_rank; 0 */
	uint32_t replay_batches;	/* batches kept for replay (0: 1000) */
	int allow_remote;		/* bind beyond loopback */
};

int kvr_events_open(const struct kvr_events_params *p, struct kvr_events **ep,
		    char *err, size_t errlen);
/* Sends what is queued, stops the thread, closes the sockets. NULL is
 * allowed. */
void kvr_events_close(struct kvr_events *e);

/* One full block: its hash, its parent's (0: the first block of a chain)
 * and its block_size token ids. */
int kvr_events_stored(struct kvr_events *e, uint64_t hash, uint64_t parent,
		      const int32_t *tokens);
int kvr_events_removed(struct kvr_events *e, uint64_t hash);
int kvr_events_cleared(struct kvr_events *e);
/* Hands the events added since the last flush to the sending thread as
 * one batch (nothing added: no message). 0 or -ENOMEM; a batch that finds
 * the queue full (a stuck sender) is dropped and counted. */
int kvr_events_flush(struct kvr_events *e);
/* The sequence number the next batch will get (the first is 0), and how
 * many batches were dropped. */
uint64_t kvr_events_next_seq(const struct kvr_events *e);
uint64_t kvr_events_dropped(const struct kvr_events *e);

#endif
