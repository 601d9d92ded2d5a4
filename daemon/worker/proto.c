// SPDX-License-Identifier: MIT
/*
 * proto.c - framing of the orchestrator <-> worker messages (proto.h):
 * a header and its payload on a stream socket, any size up to
 * KVD_MSG_MAX, an fd riding with the header's first bytes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "proto.h"

/* Writes every byte of the iovecs (advancing them), the fd with the first. */
static int send_iov(int sock, struct iovec *iov, int n, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { 0 };
	ssize_t r;

	while (n > 0) {
		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)n;
		mh.msg_control = NULL;
		mh.msg_controllen = 0;
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
		r = sendmsg(sock, &mh, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		fd = -1;
		while (n > 0 && (size_t)r >= iov->iov_len) {
			r -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + r;
			iov->iov_len -= (size_t)r;
		}
	}
	return 0;
}

int kvd_msg_sendv(int sock, uint16_t type, const struct kvd_iov *v, int n)
{
	struct kvd_msg_hdr h = { KVD_PROTO_MAGIC, KVD_PROTO_VERSION, type, 0, 0 };
	struct iovec iov[KVD_MAX_IOV + 1];
	size_t total = 0;
	int i;

	if (n < 0 || n > KVD_MAX_IOV)
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

/* Reads exactly n bytes; 0 on EOF before the first byte. */
static int read_all(int sock, void *buf, size_t n, int *fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	char *p = buf;
	size_t got = 0;

	while (got < n) {
		struct iovec iov = { p + got, n - got };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		struct cmsghdr *c;
		ssize_t r;

		if (fd) {
			mh.msg_control = u.buf;
			mh.msg_controllen = sizeof(u.buf);
		}
		r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return got ? -EPROTO : 0;
		if (fd)
			for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
				if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
				    c->cmsg_len >= CMSG_LEN(sizeof(int))) {
					int f;

					memcpy(&f, CMSG_DATA(c), sizeof(int));
					if (*fd >= 0)
						close(f);	/* one fd per message */
					else
						*fd = f;
				}
		got += (size_t)r;
	}
	return 1;
}

int kvd_msg_recv(int sock, uint16_t *type, void **buf, size_t *cap,
		 size_t *len, int *fd)
{
	struct kvd_msg_hdr h;
	int got_fd = -1, rc;

	*type = 0;
	*len = 0;
	if (fd)
		*fd = -1;
	rc = read_all(sock, &h, sizeof(h), &got_fd);
	if (rc <= 0)
		goto out;
	rc = -EPROTO;
	if (h.magic != KVD_PROTO_MAGIC || h.version != KVD_PROTO_VERSION)
		goto out;
	rc = -EMSGSIZE;
	if (h.len > KVD_MSG_MAX)
		goto out;
	if (*cap < h.len || !*buf) {
		size_t want = h.len ? h.len : 16;
		void *nb = realloc(*buf, want);

		rc = -ENOMEM;
		if (!nb)
			goto out;
		*buf = nb;
		*cap = want;
	}
	if (h.len) {
		rc = read_all(sock, *buf, h.len, NULL);
		if (rc <= 0) {
			rc = rc ? rc : -EPROTO;
			goto out;
		}
	}
	*type = h.type;
	*len = h.len;
	if (fd) {
		*fd = got_fd;
		got_fd = -1;
	}
	rc = 1;
out:
	if (got_fd >= 0)
		close(got_fd);
	return rc;
}

/* ---- non-blocking framing -------------------------------------------- */

int kvd_msg_read(int sock, struct kvd_msg_rx *rx)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} u;

	if (rx->got >= sizeof(rx->hdr) + rx->hdr.len && rx->got >= sizeof(rx->hdr))
		rx->got = 0;	/* the previous message was taken */
	for (;;) {
		struct msghdr mh = { 0 };
		struct iovec iov;
		struct cmsghdr *c;
		ssize_t r;

		if (rx->got < sizeof(rx->hdr)) {
			iov.iov_base = (char *)&rx->hdr + rx->got;
			iov.iov_len = sizeof(rx->hdr) - rx->got;
		} else {
			iov.iov_base = (char *)rx->buf + (rx->got - sizeof(rx->hdr));
			iov.iov_len = sizeof(rx->hdr) + rx->hdr.len - rx->got;
		}
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				size_t k, n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				for (k = 0; k < n; k++) {
					int f;

					memcpy(&f, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
					close(f);	/* nobody sends this side fds */
				}
			}
		if (r == 0)
			return -ECONNRESET;
		rx->got += (size_t)r;
		if (rx->got == sizeof(rx->hdr)) {
			if (rx->hdr.magic != KVD_PROTO_MAGIC || rx->hdr.version != KVD_PROTO_VERSION)
				return -EPROTO;
			if (rx->hdr.len > KVD_MSG_MAX)
				return -EMSGSIZE;
			if (rx->cap < rx->hdr.len || !rx->buf) {
				size_t want = rx->hdr.len ? rx->hdr.len : 16;
				void *nb = realloc(rx->buf, want);

				if (!nb)
					return -ENOMEM;
				rx->buf = nb;
				rx->cap = want;
			}
		}
		if (rx->got >= sizeof(rx->hdr) && rx->got == sizeof(rx->hdr) + rx->hdr.len)
			return 1;
	}
}

void kvd_msg_rx_free(struct kvd_msg_rx *rx)
{
	free(rx->buf);
	memset(rx, 0, sizeof(*rx));
}

int kvd_msg_queue(struct kvd_msg_tx *tx, uint16_t type, const struct kvd_iov *v, int n)
{
	struct kvd_msg_hdr h = { KVD_PROTO_MAGIC, KVD_PROTO_VERSION, type, 0, 0 };
	size_t total = 0, need;
	int i;

	if (n < 0 || n > KVD_MAX_IOV)
		return -EINVAL;
	for (i = 0; i < n; i++)
		total += v[i].len;
	if (total > KVD_MSG_MAX)
		return -EMSGSIZE;
	h.len = (uint32_t)total;
	if (tx->off == tx->len)
		tx->off = tx->len = 0;
	need = tx->len + sizeof(h) + total;
	if (need > tx->cap) {
		size_t cap = tx->cap ? tx->cap : 4096;
		char *nb;

		while (cap < need)
			cap *= 2;
		nb = realloc(tx->buf, cap);
		if (!nb)
			return -ENOMEM;
		tx->buf = nb;
		tx->cap = cap;
	}
	memcpy(tx->buf + tx->len, &h, sizeof(h));
	tx->len += sizeof(h);
	for (i = 0; i < n; i++) {
		if (v[i].len)
			memcpy(tx->buf + tx->len, v[i].base, v[i].len);
		tx->len += v[i].len;
	}
	return 0;
}

int kvd_msg_flush(int sock, struct kvd_msg_tx *tx)
{
	while (tx->off < tx->len) {
		ssize_t r = send(sock, tx->buf + tx->off, tx->len - tx->off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -errno;
		tx->off += (size_t)r;
	}
	tx->off = tx->len = 0;
	return 0;
}

void kvd_msg_tx_free(struct kvd_msg_tx *tx)
{
	free(tx->buf);
	memset(tx, 0, sizeof(*tx));
}
