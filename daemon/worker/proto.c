// SPDX-License-Identifier: MIT
/*
 * proto.c - framing of the orchestrator <-> worker messages (proto.h).
 * One message is one SOCK_SEQPACKET datagram; receivers peek at the
 * header first so a message of any allowed size lands in one buffer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "proto.h"

static int send_iov(int sock, struct iovec *iov, int n, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
	ssize_t r;

	if (fd >= 0) {
		struct cmsghdr *c;

		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	do
		r = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return 0;
}

int kvd_msg_sendv(int sock, uint16_t type, const struct kvd_iov *v, int n)
{
	struct kvd_msg_hdr h = { KVD_PROTO_MAGIC, KVD_PROTO_VERSION, type, 0, 0 };
	struct iovec iov[9];
	size_t total = 0;
	int i;

	if (n < 0 || n > 8)
		return -EINVAL;
	iov[0].iov_base = &h;
	iov[0].iov_len = sizeof(h);
	for (i = 0; i < n; i++) {
		iov[i + 1].iov_base = (void *)v[i].base;
		iov[i + 1].iov_len = v[i].len;
		total += v[i].len;
	}
	if (total > KVD_MSG_MAX)
		return -EMSGSIZE;
	h.len = (uint32_t)total;
	return send_iov(sock, iov, n + 1, -1);
}

int kvd_msg_send(int sock, uint16_t type, const void *payload, size_t len,
		 int fd)
{
	struct kvd_msg_hdr h = { KVD_PROTO_MAGIC, KVD_PROTO_VERSION, type, 0, 0 };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)payload, len } };

	if (len > KVD_MSG_MAX)
		return -EMSGSIZE;
	h.len = (uint32_t)len;
	return send_iov(sock, iov, len ? 2 : 1, fd);
}

int kvd_msg_recv(int sock, uint16_t *type, void **buf, size_t *cap,
		 size_t *len, int *fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct kvd_msg_hdr h;
	struct iovec iov[2];
	struct msghdr mh = { 0 };
	struct cmsghdr *c;
	int got_fd = -1;
	ssize_t r;

	*type = 0;
	*len = 0;
	if (fd)
		*fd = -1;
	do
		r = recv(sock, &h, sizeof(h), MSG_PEEK);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return 0;
	if (r < 0)
		return -errno;
	if ((size_t)r < sizeof(h) || h.magic != KVD_PROTO_MAGIC ||
	    h.version != KVD_PROTO_VERSION) {
		recv(sock, &h, 1, 0);	/* drop the datagram */
		return -EPROTO;
	}
	if (h.len > KVD_MSG_MAX) {
		recv(sock, &h, 1, 0);
		return -EMSGSIZE;
	}
	if (*cap < h.len || !*buf) {
		size_t want = h.len ? h.len : 16;
		void *nb = realloc(*buf, want);

		if (!nb)
			return -ENOMEM;
		*buf = nb;
		*cap = want;
	}
	iov[0].iov_base = &h;
	iov[0].iov_len = sizeof(h);
	iov[1].iov_base = *buf;
	iov[1].iov_len = h.len;
	mh.msg_iov = iov;
	mh.msg_iovlen = 2;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	do
		r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(int)))
			memcpy(&got_fd, CMSG_DATA(c), sizeof(int));
	if ((size_t)r != sizeof(h) + h.len || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		if (got_fd >= 0)
			close(got_fd);
		return -EPROTO;
	}
	if (fd)
		*fd = got_fd;
	else if (got_fd >= 0)
		close(got_fd);
	*type = h.type;
	*len = h.len;
	return 1;
}
