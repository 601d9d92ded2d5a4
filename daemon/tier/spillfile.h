/* SPDX-License-Identifier: MIT */
/*
 * spillfile.h - the spill file's layout (spillfile.c): a header padded to
 * a multiple of 4 KiB, then the blocks, block i at header_bytes + i x
 * block_size, so every O_DIRECT offset and length is 4 KiB aligned.
 *
 *   header: magic "KVSPILL1", version, header_bytes, shape_id (the arena's
 *   model shape: a file restores only into the same), the identity the
 *   owner gave (key, tokens_hash, n_tokens), block_size, n_blocks, the
 *   creating process's id and time, a checksum of the header itself, then
 *   n_blocks block checksums (XXH3-64 of the block's bytes seeded with the
 *   key and the block's index, so a block moved within a file or copied
 *   from another file does not verify).
 *
 * Native byte order: a spill file never leaves the process that wrote it
 * (kvt_open removes every file of an earlier life).
 */
#ifndef KVT_SPILLFILE_H
#define KVT_SPILLFILE_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#define KVT_SF_MAGIC		"KVSPILL1"
#define KVT_SF_VERSION		1u
#define KVT_SF_ALIGN		4096u
/* 2 MiB of header: 262,136 block checksums, far beyond any context */
#define KVT_SF_MAX_BLOCKS	((2u << 20) / 8u - 64u)

struct kvt_sf_header {
	char magic[8];
	uint32_t version;
	uint32_t header_bytes;
	uint64_t shape_id;
	uint64_t key;
	uint64_t tokens_hash;
	uint32_t n_tokens;
	uint32_t block_size;
	uint32_t n_blocks;
	uint32_t pid;
	uint64_t created_ns;
	uint64_t header_sum;		/* XXH3 of header_bytes with this field 0 */
	uint64_t block_sum[];		/* n_blocks */
};

/* Header bytes for n blocks: a multiple of KVT_SF_ALIGN. */
size_t kvt_sf_header_bytes(uint32_t n_blocks);
/* Fills buf (header_bytes long, zeroed here) for a new file. */
void kvt_sf_header_init(void *buf, const struct kvt_ident *id, uint64_t shape_id,
			uint32_t block_size, uint32_t n_blocks);
/* Block i's checksum as the file records it. */
uint64_t kvt_sf_block_sum(const void *block, size_t len, uint64_t key, uint32_t index);
/* Computes header_sum once every block_sum is in. */
void kvt_sf_header_seal(void *buf);
/*
 * Checks a header read back (len bytes available, at least its
 * header_bytes): 0; -EBADMSG wrong magic, version, sizes or checksum;
 * -ENODATA fewer than header_bytes; -ESTALE another shape or identity
 * (id NULL: any identity).
 */
int kvt_sf_header_check(const void *buf, size_t len, const struct kvt_ident *id,
			uint64_t shape_id, uint32_t block_size);

#endif
