// SPDX-License-Identifier: MIT
/*
 * modelid.c - a model file's fingerprint (rproto.h, struct kvr_model_id),
 * so that an orchestrator and a remote worker host notice when they
 * would run different models (their tokens would silently differ).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "rproto.h"

#define SPAN (1u << 20)

int kvr_model_id(const char *path, struct kvr_model_id *id)
{
	unsigned int dlen = 0;
	EVP_MD_CTX *md = NULL;
	char *buf = NULL;
	struct stat st;
	int fd, rc = -EIO;
	off_t at[2];

	memset(id, 0, sizeof(*id));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	buf = malloc(SPAN);
	md = EVP_MD_CTX_new();
	if (!buf || !md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL))
		goto out;
	id->size = (uint64_t)st.st_size;
	at[0] = 0;
	at[1] = st.st_size > (off_t)SPAN ? st.st_size - (off_t)SPAN : 0;
	for (int i = 0; i < 2; i++) {
		ssize_t n = pread(fd, buf, SPAN, at[i]);

		if (n < 0 || !EVP_DigestUpdate(md, buf, (size_t)n))
			goto out;
	}
	if (EVP_DigestFinal_ex(md, id->digest, &dlen) && dlen == sizeof(id->digest))
		rc = 0;
out:
	EVP_MD_CTX_free(md);
	free(buf);
	close(fd);
	return rc;
}
