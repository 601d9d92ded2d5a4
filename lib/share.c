// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * What every process that shares an arena needs: where a block lives in
 * the mapping (blocks never straddle a 2 MiB page), and passing fds (arena,
 * dma-buf, memfd) with a message over a Unix socket (SCM_RIGHTS).  One copy
 * here instead of one per consumer.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"

KVA_EXPORT uint64_t kva_block_offset(uint32_t block_size, uint32_t block)
{
	uint32_t per;

	if (block_size < KVA_BLOCK_MIN || block_size > KVA_BLOCK_MAX ||
	    block_size % KVA_BLOCK_MIN)
		return UINT64_MAX;
	per = (uint32_t)(KVA_PAGE_SIZE / block_size);
	return (uint64_t)(block / per) * KVA_PAGE_SIZE +
	       (uint64_t)(block % per) * block_size;
}

/* The rest of a stream message after a partial first write or read. */
static int kva_io_all(int sock, char *p, size_t len, bool send)
{
	ssize_t n;

	while (len) {
		n = send ? write(sock, p, len) : read(sock, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int kva_sock_stream(int sock)
{
	int type = 0;
	socklen_t len = sizeof(type);

	if (getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &len))
		return -errno;
	return type == SOCK_STREAM;
}

KVA_EXPORT int kva_send_fds(int sock, const void *data, size_t len,
			    const int *fds, unsigned int nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVA_MAX_FDS)];
		struct cmsghdr align;
	} cb;
	struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	ssize_t n;
	int stream;

	if (!data || !len || nfds > KVA_MAX_FDS || (nfds && !fds))
		return -EINVAL;
	stream = kva_sock_stream(sock);
	if (stream < 0)
		return stream;
	if (nfds) {
		memset(&cb, 0, sizeof(cb));
		msg.msg_control = cb.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if ((size_t)n == len)
		return 0;
	/* The fds went with the first byte; a stream takes the rest plain. */
	if (!stream)
		return -EMSGSIZE;
	return kva_io_all(sock, (char *)data + n, len - (size_t)n, true);
}

KVA_EXPORT int kva_recv_fds(int sock, void *data, size_t len, int *fds,
			    unsigned int *nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * KVA_MAX_FDS)];
		struct cmsghdr align;
	} cb;
	struct iovec iov = { .iov_base = data, .iov_len = len };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cb.buf, .msg_controllen = sizeof(cb.buf),
	};
	unsigned int want = nfds ? *nfds : 0, got = 0, i;
	struct cmsghdr *c;
	int stream, ret = 0;
	ssize_t n;

	if (!data || !len || (want && !fds))
		return -EINVAL;
	stream = kva_sock_stream(sock);
	if (stream < 0)
		return stream;
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	/* Keep up to `want` fds; close whatever else came along. */
	for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		size_t k, cnt;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < cnt; k++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(fd));
			if (got < want) {
				fds[got++] = fd;
			} else {
				close(fd);
				ret = -EMSGSIZE;
			}
		}
	}
	if (msg.msg_flags & MSG_CTRUNC)
		ret = -EMSGSIZE;		/* fds were lost on the way */
	if (!ret && n == 0)
		ret = -EPIPE;
	else if (!ret && (size_t)n < len)
		ret = stream ? kva_io_all(sock, (char *)data + n,
					  len - (size_t)n, false) : -EMSGSIZE;
	if (ret) {
		for (i = 0; i < got; i++)
			close(fds[i]);
		got = 0;
	}
	if (nfds)
		*nfds = got;
	return ret;
}
