// SPDX-License-Identifier: MIT
/*
 * spillfile.c - the spill file's header: building it, sealing it with its
 * checksum, and checking one read back (layout in spillfile.h). No I/O
 * here (tier.c does that); this file only decides whether bytes are a
 * header this process wrote for the KV it is asked for.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY	/* XXH3_state_t on the stack */
#include <xxhash.h>

#include "spillfile.h"

_Static_assert(sizeof(struct kvt_sf_header) == 72, "spill header layout");

size_t kvt_sf_header_bytes(uint32_t n_blocks)
{
	size_t b = sizeof(struct kvt_sf_header) + (size_t)n_blocks * sizeof(uint64_t);

	return (b + KVT_SF_ALIGN - 1) / KVT_SF_ALIGN * KVT_SF_ALIGN;
}

void kvt_sf_header_init(void *buf, const struct kvt_ident *id, uint64_t shape_id,
			uint32_t block_size, uint32_t n_blocks)
{
	struct kvt_sf_header *h = buf;
	size_t hb = kvt_sf_header_bytes(n_blocks);
	struct timespec ts;

	memset(buf, 0, hb);
	memcpy(h->magic, KVT_SF_MAGIC, sizeof(h->magic));
	h->version = KVT_SF_VERSION;
	h->header_bytes = (uint32_t)hb;
	h->shape_id = shape_id;
	h->key = id->key;
	h->tokens_hash = id->tokens_hash;
	h->n_tokens = id->n_tokens;
	h->block_size = block_size;
	h->n_blocks = n_blocks;
	h->pid = (uint32_t)getpid();
	clock_gettime(CLOCK_REALTIME, &ts);
	h->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t kvt_sf_block_sum(const void *block, size_t len, uint64_t key, uint32_t index)
{
	/* the seed ties the block to its file and place */
	return XXH3_64bits_withSeed(block, len, key ^ ((uint64_t)index * 0x9e3779b97f4a7c15ull));
}

static uint64_t header_sum(const struct kvt_sf_header *h)
{
	XXH3_state_t st;
	const uint64_t zero = 0;
	size_t off = offsetof(struct kvt_sf_header, header_sum);

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, h, off);
	XXH3_64bits_update(&st, &zero, sizeof(zero));
	XXH3_64bits_update(&st, (const char *)h + off + sizeof(zero),
			   h->header_bytes - off - sizeof(zero));
	return XXH3_64bits_digest(&st);
}

void kvt_sf_header_seal(void *buf)
{
	struct kvt_sf_header *h = buf;

	h->header_sum = header_sum(h);
}

int kvt_sf_header_check(const void *buf, size_t len, const struct kvt_ident *id,
			uint64_t shape_id, uint32_t block_size)
{
	const struct kvt_sf_header *h = buf;

	if (len < sizeof(*h))
		return -ENODATA;
	if (memcmp(h->magic, KVT_SF_MAGIC, sizeof(h->magic)) || h->version != KVT_SF_VERSION ||
	    h->n_blocks > KVT_SF_MAX_BLOCKS ||
	    h->header_bytes != kvt_sf_header_bytes(h->n_blocks))
		return -EBADMSG;
	if (len < h->header_bytes)
		return -ENODATA;
	if (header_sum(h) != h->header_sum)
		return -EBADMSG;
	if (h->shape_id != shape_id || h->block_size != block_size)
		return -ESTALE;
	if (id && (h->key != id->key || h->tokens_hash != id->tokens_hash ||
		   h->n_tokens != id->n_tokens))
		return -ESTALE;
	return 0;
}
