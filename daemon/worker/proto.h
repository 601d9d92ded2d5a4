/* SPDX-License-Identifier: MIT */
/*
 * proto.h - the one message protocol between kvarenad's orchestrator and
 * its stage workers, over a connected AF_UNIX SOCK_STREAM socket.
 *
 * What crosses the socket: the arena's data fd once (SCM_RIGHTS, with the
 * geometry), then block tables, token ids, sampling parameters and sampled
 * tokens with their log-probabilities. Never KV bytes, except in copy
 * hand-off mode (--kv-handoff copy), which exists to measure what the
 * arena saves: there RESULT carries the bytes of the blocks a prefill step
 * wrote and KV_LOAD carries them to a decode worker.
 *
 * Every message is a struct kvd_msg_hdr and `len` payload bytes. Payload structs are fixed-width and little-endian (same host).
 * A receiver checks every count against the payload length before use.
 * Messages larger than KVD_MSG_MAX are refused.
 */
#ifndef KVD_PROTO_H
#define KVD_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define KVD_PROTO_MAGIC 0x6b766431u	/* "kvd1" */
#define KVD_PROTO_VERSION 2
#define KVD_MSG_MAX (64u << 20)	/* copy mode carries whole blocks */

enum kvd_msg_type {
	KVD_MSG_HELLO = 1,	/* orch -> worker: struct kvd_hello + data fd */
	KVD_MSG_READY,		/* worker -> orch: struct kvd_ready */
	KVD_MSG_STEP,		/* orch -> worker: kvd_step + seqs */
	KVD_MSG_RESULT,		/* worker -> orch: kvd_result + seqs */
	KVD_MSG_KV_LOAD,	/* orch -> decode worker (copy mode) */
	KVD_MSG_KV_LOADED,	/* worker -> orch: struct kvd_result (no seqs) */
};

struct kvd_msg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len;		/* payload bytes after this header */
	uint32_t pad;
};

/* Where the blocks are: block `id` starts at byte
 *   (id / blocks_per_page) * 2 MiB + (id % blocks_per_page) * block_size
 * and holds kv_block_bytes bytes in the engine's layout
 * (Documentation/engine.md, "KV block layout"). */
struct kvd_kv_geom {
	uint64_t arena_bytes;
	uint32_t block_size;
	uint32_t blocks_per_page;
	uint32_t blocks_total;
	uint32_t block_tokens;
	uint32_t dtype;		/* enum kve_kv_dtype: 0 F32, 1 F16, 2 Q8_0 */
	uint32_t kv_block_bytes;
	uint32_t n_layers, n_kv_heads, head_dim;
	uint32_t pad;
};

enum kvd_role { KVD_ROLE_PREFILL = 1, KVD_ROLE_DECODE = 2 };

struct kvd_hello {
	uint32_t role;		/* enum kvd_role */
	uint32_t copy_mode;	/* 1: --kv-handoff copy */
	struct kvd_kv_geom geom;
};

struct kvd_ready {
	int32_t status;		/* 0, or -errno: the worker cannot serve */
	uint32_t vocab;
	uint32_t pid;
	uint32_t pad;
	char backend[32];
	char message[192];	/* why, when status != 0 */
};

/* A step's kind says what the orchestrator scheduled (metrics, logs);
 * any kind may carry any mix of sequences: DECODE steps have one token
 * per sequence, PREFILL steps prompt chunks, MIXED both (the decode
 * tokens of running sequences with chunks of pending prompts). */
enum kvd_step_kind { KVD_STEP_PREFILL = 1, KVD_STEP_DECODE = 2, KVD_STEP_MIXED = 3 };

#define KVD_SEQ_LOGPROBS 1u	/* report the chosen token's logprob */
#define KVD_SEQ_SAMPLER 2u	/* a struct kvd_sampler_wire follows the
				 * constraint bytes (after the block ids
				 * when there are none) */
/* Sample a token from the logits of the sequence's last new token. Without
 * it the sequence is a prompt chunk with more to follow: the worker only
 * writes its KV, and its result entry has token -1 and the rng unchanged. */
#define KVD_SEQ_SAMPLE 4u

/* A step: n_seq sequences (distinct), each a struct kvd_step_seq followed
 * by n_new int32 tokens, n_blocks uint32 block ids, constraint_len bytes
 * of constraint, the sampler (KVD_SEQ_SAMPLER), then zero bytes to a
 * multiple of 8 (every record starts 8-byte aligned). */
struct kvd_step {
	uint64_t step_id;
	uint32_t kind;		/* enum kvd_step_kind */
	uint32_t n_seq;
};

struct kvd_step_seq {
	uint64_t seq_id;
	uint32_t n_kv;		/* positions already holding KV */
	uint32_t n_new;		/* tokens to append, >= 1 */
	uint32_t n_blocks;	/* block table entries (cover n_kv + n_new) */
	uint32_t flags;		/* KVD_SEQ_* */
	uint32_t top_logprobs;	/* 0..20 alternatives to report */
	float temperature;	/* <= 0: greedy */
	float top_p;
	uint32_t constraint_len;	/* bytes of a struct kvd_constraint_wire
					 * after the block ids (0: free) */
	uint64_t rng;		/* sampler state in; RESULT carries it out */
};

/* Structured decoding: the worker samples only tokens that keep the
 * output a valid prefix. Followed by n_hist int32 tokens this request
 * generated so far (the worker rebuilds its matcher from them when it
 * has none at that point: a restarted or another worker), json_len bytes
 * of spec and name_len of tool name. */
#define KVD_CONSTRAINT_LAZY 1u
#define KVD_CONSTRAINT_BUDGET 2u	/* near tokens_left, steer to close in time */
struct kvd_constraint_wire {
	uint32_t kind;		/* enum kvd_constraint_kind (kvd.h) */
	uint32_t flags;		/* KVD_CONSTRAINT_* */
	uint32_t max_calls;
	uint32_t json_len;
	uint32_t name_len;
	uint32_t n_hist;
	uint64_t hash;		/* identifies the spec */
	uint32_t tokens_left;	/* this token included: near it, the output
				 * is steered to close in time */
	uint32_t pad;
};

/* Sampling beyond temperature and top-p (kvd.h's kvd_sampling), followed
 * by n_bias {int32 token, float bias}, n_context int32 distinct tokens of
 * the context (repetition_penalty) and n_generated {int32 token, uint32
 * count} of the tokens generated so far (frequency/presence penalties):
 * the whole state, every step, so any worker samples the same. */
#define KVD_SAMPLER_MAX_ENTRIES (1u << 22)	/* per array */
struct kvd_sampler_wire {
	uint32_t top_k;		/* 0: off */
	float min_p;		/* 0: off */
	float repetition_penalty;
	float frequency_penalty;
	float presence_penalty;
	uint32_t n_bias;
	uint32_t n_context;
	uint32_t n_generated;
};

struct kvd_result {
	uint64_t step_id;
	int32_t status;		/* 0 or -errno for the whole step */
	uint32_t n_seq;
	uint64_t compute_ns;
	uint64_t kv_bytes;	/* copy mode: KV bytes this message carries */
};

/* Followed by n_top struct kvd_top entries, then kv_bytes bytes of KV
 * (copy mode: the blocks from block first_block on, whole). */
struct kvd_result_seq {
	uint64_t seq_id;
	int32_t token;		/* sampled next token; -1 without KVD_SEQ_SAMPLE */
	float logprob;
	uint64_t rng;
	uint32_t n_top;
	uint32_t first_block;	/* copy mode: table index of the first block sent */
	uint32_t n_kv_blocks;	/* copy mode: blocks sent */
	uint32_t pad;
};

struct kvd_top {
	int32_t token;
	float logprob;
};

/* KV_LOAD payload: struct kvd_kv_load, n_blocks uint32 ids, then
 * n_blocks * kv_block_bytes bytes. */
struct kvd_kv_load {
	uint64_t step_id;
	uint32_t n_blocks;
	uint32_t pad;
};

/* Send one message (and optionally one fd). 0 or -errno. */
int kvd_msg_send(int sock, uint16_t type, const void *payload, size_t len,
		 int fd);
/* Send a message whose payload is gathered from n <= KVD_MAX_IOV pieces. */
#define KVD_MAX_IOV 64
struct kvd_iov {
	const void *base;
	size_t len;
};
int kvd_msg_sendv(int sock, uint16_t type, const struct kvd_iov *iov, int n);
/* Receive one message into a buffer grown as needed (*buf, *cap; free()
 * it). Returns 1 with *type and *len (payload bytes) set, 0 on orderly
 * EOF, or -errno (-EPROTO on a malformed header, -EMSGSIZE over
 * KVD_MSG_MAX). *fd receives a passed fd or -1 (fd may be NULL: a passed
 * fd is then closed). */
int kvd_msg_recv(int sock, uint16_t *type, void **buf, size_t *cap,
		 size_t *len, int *fd);

/*
 * Non-blocking framing for an event loop (the orchestrator's): a message
 * is assembled across reads in a struct kvd_msg_rx and written across
 * writes from a struct kvd_msg_tx, so a peer that stops mid-message never
 * blocks the reader or the writer. Neither side passes fds (a received
 * one is closed).
 */
struct kvd_msg_rx {
	struct kvd_msg_hdr hdr;
	size_t got;		/* header and payload bytes received so far */
	void *buf;		/* the payload, hdr.len bytes once complete */
	size_t cap;
};

/* Reads what the socket has. 1: a whole message is in rx (hdr.type,
 * buf, hdr.len; the next call starts a new one), 0: more to come
 * (EAGAIN), or -errno: -ECONNRESET on EOF, -EPROTO on a bad header,
 * -EMSGSIZE over KVD_MSG_MAX. */
int kvd_msg_read(int sock, struct kvd_msg_rx *rx);
void kvd_msg_rx_free(struct kvd_msg_rx *rx);

struct kvd_msg_tx {
	char *buf;
	size_t len, off, cap;	/* bytes queued, bytes already written */
};

/* Appends a whole message (header and the gathered payload). */
int kvd_msg_queue(struct kvd_msg_tx *tx, uint16_t type, const struct kvd_iov *iov, int n);
/* Writes what the socket takes: 0 all written, 1 bytes left (wait for
 * POLLOUT), or -errno. */
int kvd_msg_flush(int sock, struct kvd_msg_tx *tx);
void kvd_msg_tx_free(struct kvd_msg_tx *tx);

/* The address of block `id` in a mapping of the arena at base. */
static inline void *kvd_block_addr(void *base, const struct kvd_kv_geom *g,
				   uint32_t id)
{
	return (char *)base + (uint64_t)(id / g->blocks_per_page) * (2u << 20) +
	       (uint64_t)(id % g->blocks_per_page) * g->block_size;
}

#endif
