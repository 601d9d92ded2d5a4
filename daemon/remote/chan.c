// SPDX-License-Identifier: MIT
/*
 * chan.c - the authenticated control channel of chan.h: TCP sockets with
 * keepalive and I/O timeouts, TLS 1.3 with an external pre-shared key
 * (OpenSSL's PSK callbacks; TLS 1.3 then uses the key with (EC)DHE and
 * AES-128-GCM-SHA256), and proto.h framing on top.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include "chan.h"

#define PSK_IDENTITY "kvarena-remote-v1"
#define PSK_LABEL "kvarena remote control channel v1"

struct kvr_chan {
	int fd;
	SSL_CTX *ctx;
	SSL *ssl;
	struct kvr_psk key;
	char peer[80];
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

int kvr_psk_load(const char *path, struct kvr_psk *k, char *err, size_t errlen)
{
	unsigned char buf[4097];
	unsigned int dlen = 0;
	EVP_MD_CTX *md;
	struct stat st;
	ssize_t n;
	size_t len;
	int fd, ok;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		set_err(err, errlen, "key file %s: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		set_err(err, errlen, "key file %s: not a regular file", path);
		return -EINVAL;
	}
	if (st.st_mode & 077) {
		close(fd);
		set_err(err, errlen, "key file %s: readable by group or others (chmod 600 it)",
			path);
		return -EPERM;
	}
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0 || n == (ssize_t)sizeof(buf)) {
		set_err(err, errlen, "key file %s: %s", path,
			n < 0 ? strerror(errno) : "larger than 4 KiB");
		return n < 0 ? -EIO : -EFBIG;
	}
	len = (size_t)n;
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
		len--;
	if (len < KVR_PSK_MIN_BYTES) {
		OPENSSL_cleanse(buf, sizeof(buf));
		set_err(err, errlen, "key file %s: %zu bytes, at least %d wanted", path, len,
			KVR_PSK_MIN_BYTES);
		return -EINVAL;
	}
	md = EVP_MD_CTX_new();
	ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) &&
	     EVP_DigestUpdate(md, PSK_LABEL, sizeof(PSK_LABEL)) &&
	     EVP_DigestUpdate(md, buf, len) && EVP_DigestFinal_ex(md, k->key, &dlen) &&
	     dlen == sizeof(k->key);
	EVP_MD_CTX_free(md);
	OPENSSL_cleanse(buf, sizeof(buf));
	if (!ok) {
		set_err(err, errlen, "key file %s: cannot hash it", path);
		return -EIO;
	}
	return 0;
}

/* "host:port", "[v6]:port", "*:port" or ":port". */
static int split_hostport(const char *hp, char *host, size_t hlen, char *port, size_t plen)
{
	const char *c;
	size_t n;

	if (*hp == '[') {
		const char *e = strchr(hp, ']');

		if (!e || e[1] != ':')
			return -EINVAL;
		n = (size_t)(e - hp - 1);
		if (n >= hlen)
			return -EINVAL;
		memcpy(host, hp + 1, n);
		host[n] = 0;
		c = e + 1;
	} else {
		c = strrchr(hp, ':');
		if (!c)
			return -EINVAL;
		n = (size_t)(c - hp);
		if (n >= hlen)
			return -EINVAL;
		memcpy(host, hp, n);
		host[n] = 0;
	}
	if (!c[1] || strlen(c + 1) >= plen || strspn(c + 1, "0123456789") != strlen(c + 1) ||
	    atol(c + 1) > 65535)
		return -EINVAL;
	snprintf(port, plen, "%s", c + 1);
	if (!strcmp(host, "*"))
		host[0] = 0;
	return 0;
}

int kvr_listen(const char *hostport, int *fdp, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM }, *ai;
	char host[256], port[16];
	int fd, one = 1, rc;

	*fdp = -1;
	if (split_hostport(hostport, host, sizeof(host), port, sizeof(port))) {
		set_err(err, errlen, "listen address '%s': want HOST:PORT", hostport);
		return -EINVAL;
	}
	rc = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
	if (rc) {
		set_err(err, errlen, "listen address '%s': %s", hostport, gai_strerror(rc));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 16)) {
		rc = -errno;
		set_err(err, errlen, "listen on %s: %s", hostport, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return rc;
	}
	freeaddrinfo(ai);
	*fdp = fd;
	return 0;
}

/* Reads and writes that wait this long fail; so does data the peer does
 * not acknowledge for this long (the peer is gone). */
static void set_io_timeout(int fd, int timeout_ms)
{
	struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
	unsigned int ut = (unsigned int)timeout_ms;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
}

static void sock_opts(int fd, int timeout_ms)
{
	int one = 1, idle = 5, intvl = 2, cnt = 3;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	set_io_timeout(fd, timeout_ms);
}

static unsigned int psk_server_cb(SSL *ssl, const char *identity, unsigned char *psk,
				  unsigned int max)
{
	struct kvr_chan *c = SSL_get_app_data(ssl);

	if (!c || !identity || strcmp(identity, PSK_IDENTITY) || max < sizeof(c->key.key))
		return 0;
	memcpy(psk, c->key.key, sizeof(c->key.key));
	return sizeof(c->key.key);
}

static unsigned int psk_client_cb(SSL *ssl, const char *hint, char *identity,
				  unsigned int max_id, unsigned char *psk, unsigned int max)
{
	struct kvr_chan *c = SSL_get_app_data(ssl);

	(void)hint;
	if (!c || max_id < sizeof(PSK_IDENTITY) || max < sizeof(c->key.key))
		return 0;
	memcpy(identity, PSK_IDENTITY, sizeof(PSK_IDENTITY));
	memcpy(psk, c->key.key, sizeof(c->key.key));
	return sizeof(c->key.key);
}

static void tls_reason(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();

	if (e)
		ERR_error_string_n(e, buf, len);
	else
		snprintf(buf, len, "%s", errno ? strerror(errno) : "connection closed");
	ERR_clear_error();
}

static int handshake(struct kvr_chan *c, int server, const struct kvr_psk *k,
		     int io_timeout_ms, char *err, size_t errlen)
{
	char why[256];
	int rc;

	c->key = *k;
	c->ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!c->ctx || !SSL_CTX_set_min_proto_version(c->ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_ciphersuites(c->ctx, "TLS_AES_128_GCM_SHA256:"
					      "TLS_CHACHA20_POLY1305_SHA256")) {
		set_err(err, errlen, "TLS: cannot set up OpenSSL");
		return -ENOMEM;
	}
	/* no tickets: every connection proves the key afresh */
	SSL_CTX_set_num_tickets(c->ctx, 0);
	SSL_CTX_set_session_cache_mode(c->ctx, SSL_SESS_CACHE_OFF);
	if (server)
		SSL_CTX_set_psk_server_callback(c->ctx, psk_server_cb);
	else
		SSL_CTX_set_psk_client_callback(c->ctx, psk_client_cb);
	c->ssl = SSL_new(c->ctx);
	if (!c->ssl || !SSL_set_fd(c->ssl, c->fd)) {
		set_err(err, errlen, "TLS: cannot set up OpenSSL");
		return -ENOMEM;
	}
	SSL_set_app_data(c->ssl, c);
	errno = 0;
	rc = server ? SSL_accept(c->ssl) : SSL_connect(c->ssl);
	if (rc != 1) {
		int timed_out = errno == EAGAIN || errno == EWOULDBLOCK;

		tls_reason(why, sizeof(why));
		set_err(err, errlen, "TLS handshake with %s failed: %s%s", c->peer,
			timed_out ? "timed out" : why,
			timed_out ? "" : " (a peer without the key, or not a kvarena peer)");
		return timed_out ? -ETIMEDOUT : -EACCES;
	}
	set_io_timeout(c->fd, io_timeout_ms);
	return 0;
}

static void peer_name(struct kvr_chan *c)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char h[INET6_ADDRSTRLEN] = "?", p[8] = "?";

	if (!getpeername(c->fd, (struct sockaddr *)&ss, &sl))
		getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p),
			    NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(c->peer, sizeof(c->peer), "%s:%s", h, p);
}

int kvr_chan_accept(int lfd, const struct kvr_psk *k, int timeout_ms, int io_timeout_ms,
		    struct kvr_chan **cp, char *err, size_t errlen)
{
	struct kvr_chan *c;
	int rc;

	*cp = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c->fd < 0) {
		rc = -errno;
		set_err(err, errlen, "accept: %s", strerror(errno));
		free(c);
		return rc;
	}
	peer_name(c);
	sock_opts(c->fd, timeout_ms);
	rc = handshake(c, 1, k, io_timeout_ms, err, errlen);
	if (rc) {
		kvr_chan_close(c);
		return rc;
	}
	*cp = c;
	return 0;
}

int kvr_chan_connect(const char *hostport, const struct kvr_psk *k, int timeout_ms,
		     int io_timeout_ms, struct kvr_chan **cp, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai, *a;
	char host[256], port[16];
	struct kvr_chan *c;
	int rc;

	*cp = NULL;
	if (split_hostport(hostport, host, sizeof(host), port, sizeof(port)) || !*host) {
		set_err(err, errlen, "address '%s': want HOST:PORT", hostport);
		return -EINVAL;
	}
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc) {
		set_err(err, errlen, "address '%s': %s", hostport, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		freeaddrinfo(ai);
		return -ENOMEM;
	}
	c->fd = -1;
	rc = -ECONNREFUSED;
	for (a = ai; a; a = a->ai_next) {
		c->fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			continue;
		sock_opts(c->fd, timeout_ms);	/* SO_SNDTIMEO bounds connect() too */
		if (!connect(c->fd, a->ai_addr, a->ai_addrlen))
			break;
		rc = -errno;
		close(c->fd);
		c->fd = -1;
	}
	freeaddrinfo(ai);
	if (c->fd < 0) {
		set_err(err, errlen, "connect to %s: %s", hostport, strerror(-rc));
		free(c);
		return rc;
	}
	peer_name(c);
	rc = handshake(c, 0, k, io_timeout_ms, err, errlen);
	if (rc) {
		kvr_chan_close(c);
		return rc;
	}
	*cp = c;
	return 0;
}

void kvr_chan_close(struct kvr_chan *c)
{
	if (!c)
		return;
	if (c->ssl) {
		SSL_shutdown(c->ssl);	/* close_notify; no waiting for the peer's */
		SSL_free(c->ssl);
	}
	SSL_CTX_free(c->ctx);
	if (c->fd >= 0)
		close(c->fd);
	OPENSSL_cleanse(&c->key, sizeof(c->key));
	ERR_clear_error();
	free(c);
}

static int io_error(struct kvr_chan *c, int r)
{
	int e = SSL_get_error(c->ssl, r);

	ERR_clear_error();
	if (e == SSL_ERROR_ZERO_RETURN)
		return 0;
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ||
	    (e == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK)))
		return -ETIMEDOUT;	/* SO_RCVTIMEO / SO_SNDTIMEO */
	return -ECONNRESET;
}

int kvr_chan_write(struct kvr_chan *c, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		int chunk = len > (1u << 30) ? 1 << 30 : (int)len, r;

		r = SSL_write(c->ssl, p, chunk);
		if (r <= 0) {
			r = io_error(c, r);
			return r ? r : -EPIPE;
		}
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

/* Exactly n bytes; 0 on a clean close before the first. */
static int read_full(struct kvr_chan *c, void *buf, size_t n)
{
	char *p = buf;
	size_t got = 0;

	while (got < n) {
		size_t want = n - got;
		int r = SSL_read(c->ssl, p + got, want > (1u << 30) ? 1 << 30 : (int)want);

		if (r <= 0) {
			r = io_error(c, r);
			if (!r)
				return got ? -EPROTO : 0;
			return r;
		}
		got += (size_t)r;
	}
	return 1;
}

int kvr_chan_send(struct kvr_chan *c, uint16_t type, const struct kvd_iov *iov, int n)
{
	struct kvd_msg_hdr h = { KVD_PROTO_MAGIC, KVD_PROTO_VERSION, type, 0, 0 };
	size_t total = 0, off;
	char *buf;
	int i, rc;

	if (n < 0 || n > KVD_MAX_IOV)
		return -EINVAL;
	for (i = 0; i < n; i++)
		total += iov[i].len;
	if (total > KVD_MSG_MAX)
		return -EMSGSIZE;
	h.len = (uint32_t)total;
	/* one write: TLS records are not split across the header */
	buf = malloc(sizeof(h) + total);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, &h, sizeof(h));
	off = sizeof(h);
	for (i = 0; i < n; i++) {
		if (iov[i].len)
			memcpy(buf + off, iov[i].base, iov[i].len);
		off += iov[i].len;
	}
	rc = kvr_chan_write(c, buf, off);
	free(buf);
	return rc;
}

int kvr_chan_recv(struct kvr_chan *c, uint16_t *type, void **buf, size_t *cap,
		  size_t *len)
{
	struct kvd_msg_hdr h;
	int rc;

	*type = 0;
	*len = 0;
	rc = read_full(c, &h, sizeof(h));
	if (rc <= 0)
		return rc;
	if (h.magic != KVD_PROTO_MAGIC || h.version != KVD_PROTO_VERSION)
		return -EPROTO;
	if (h.len > KVD_MSG_MAX)
		return -EMSGSIZE;
	if (*cap < h.len || !*buf) {
		size_t want = h.len ? h.len : 16;
		void *nb = realloc(*buf, want);

		if (!nb)
			return -ENOMEM;
		*buf = nb;
		*cap = want;
	}
	if (h.len) {
		rc = read_full(c, *buf, h.len);
		if (rc <= 0)
			return rc ? rc : -EPROTO;
	}
	*type = h.type;
	*len = h.len;
	return 1;
}

int kvr_chan_fd(const struct kvr_chan *c)
{
	return c->fd;
}

int kvr_chan_pending(struct kvr_chan *c)
{
	return SSL_has_pending(c->ssl);
}

const char *kvr_chan_peer(const struct kvr_chan *c)
{
	return c->peer;
}
