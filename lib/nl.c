// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * kva_nl_*: the "kvarena" generic netlink family through libnl-genl-3:
 * arena and session dumps decoded into the same UAPI structs the ioctls
 * fill, policy changes, and the "events" multicast group.  Extended acks
 * are on, so a refused request leaves the kernel's reason in kva_nl_error().
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>

#include "internal.h"

struct kva_nl {
	struct nl_sock *sk;		/* requests */
	struct nl_sock *ev;		/* events, once subscribed */
	int family;
	int grp;
	char error[256];
};

/*
 * A libnl failure as the errno behind it: the socket's own errno when the
 * failure was a system call (ENOBUFS: the receive queue overran and a
 * monitor must resync), else libnl's code mapped back.
 */
static int kva_nl_errno(int nle, int sys_errno)
{
	if (nle >= 0)
		return 0;
	if (sys_errno)
		return -sys_errno;
	switch (-nle) {
	case NLE_NOMEM: return -ENOMEM;
	case NLE_PERM: return -EPERM;
	case NLE_AGAIN: return -EAGAIN;
	case NLE_INTR: return -EINTR;
	case NLE_BAD_SOCK: return -EBADF;
	case NLE_OBJ_NOTFOUND: return -ENOENT;
	case NLE_MSG_TRUNC: return -EMSGSIZE;
	case NLE_DUMP_INTR: return -EAGAIN;	/* the dump changed: retry */
	case NLE_PROTO_MISMATCH: return -EPROTONOSUPPORT;
	case NLE_NOACCESS: return -EACCES;
	case NLE_INVAL: return -EINVAL;
	case NLE_RANGE: return -ERANGE;
	case NLE_OPNOTSUPP: return -EOPNOTSUPP;
	case NLE_NODEV: return -ENODEV;
	default: return -EIO;
	}
}

/* nl_recvmsgs with the system errno kept for kva_nl_errno(). */
static int kva_nl_recv(struct nl_sock *sk, struct nl_cb *cb, int *sys_errno)
{
	int ret;

	errno = 0;
	ret = nl_recvmsgs(sk, cb);
	*sys_errno = ret < 0 ? errno : 0;
	return ret;
}

KVA_EXPORT int kva_nl_open(struct kva_nl **nlp)
{
	struct kva_nl *nl = calloc(1, sizeof(*nl));
	int one = 1, ret;

	if (!nl)
		return -ENOMEM;
	nl->sk = nl_socket_alloc();
	if (!nl->sk) {
		free(nl);
		return -ENOMEM;
	}
	ret = genl_connect(nl->sk);
	if (!ret)
		ret = genl_ctrl_resolve(nl->sk, KVA_GENL_NAME);
	if (ret < 0) {
		/* The family exists only while kvarena.ko is loaded. */
		ret = kva_nl_errno(ret, 0);
		nl_socket_free(nl->sk);
		free(nl);
		return ret;
	}
	nl->family = ret;
	setsockopt(nl_socket_get_fd(nl->sk), SOL_NETLINK, NETLINK_EXT_ACK,
		   &one, sizeof(one));
	*nlp = nl;
	return 0;
}

KVA_EXPORT void kva_nl_close(struct kva_nl *nl)
{
	if (!nl)
		return;
	if (nl->ev)
		nl_socket_free(nl->ev);
	nl_socket_free(nl->sk);
	free(nl);
}

KVA_EXPORT const char *kva_nl_error(const struct kva_nl *nl)
{
	return nl->error;
}

/* The request's outcome: errno from the ack, and the extack message. */
struct kva_req {
	struct kva_nl *nl;
	int err;
	int done;			/* the ack, DONE or an error arrived */
	int (*parse)(struct nlattr **tb, void *ctx);
	void *ctx;
};

static int kva_err_cb(struct sockaddr_nl *who, struct nlmsgerr *e, void *arg)
{
	struct nlmsghdr *nlh = (struct nlmsghdr *)e - 1;
	struct kva_req *req = arg;
	struct nlattr *tb[NLMSGERR_ATTR_MAX + 1];
	size_t off = sizeof(*e);

	(void)who;
	req->err = e->error;
	req->done = 1;
	if (nlh->nlmsg_flags & NLM_F_ACK_TLVS) {
		if (!(nlh->nlmsg_flags & NLM_F_CAPPED))
			off += e->msg.nlmsg_len - NLMSG_HDRLEN;
		if (nlh->nlmsg_len > NLMSG_HDRLEN + off &&
		    !nla_parse(tb, NLMSGERR_ATTR_MAX,
			       (struct nlattr *)((char *)e + off),
			       (int)(nlh->nlmsg_len - NLMSG_HDRLEN - off),
			       NULL) &&
		    tb[NLMSGERR_ATTR_MSG])
			snprintf(req->nl->error, sizeof(req->nl->error), "%s",
				 nla_get_string(tb[NLMSGERR_ATTR_MSG]));
	}
	return NL_STOP;
}

static int kva_valid_cb(struct nl_msg *msg, void *arg)
{
	struct nlattr *tb[KVA_NL_A_MAX + 1];
	struct kva_req *req = arg;
	int ret;

	if (genlmsg_parse(nlmsg_hdr(msg), 0, tb, KVA_NL_A_MAX, NULL))
		return NL_SKIP;
	/* After a callback's error, keep reading (to drain), not parsing. */
	ret = req->parse && !req->err ? req->parse(tb, req->ctx) : 0;
	if (ret)
		req->err = ret;
	return NL_OK;
}

/* NLMSG_DONE ends a dump, an ack ends a doit: either way, the end. */
static int kva_end_cb(struct nl_msg *msg, void *arg)
{
	struct kva_req *req = arg;

	(void)msg;
	req->done = 1;
	return NL_STOP;
}

/*
 * Copy a kva_nl_* record into the caller's `size` bytes, and set the
 * sizes the caller reads back: its own, and its embedded UAPI record's.
 */
static void kva_nl_out(void *out, size_t size, const void *full,
		       size_t full_size, size_t uapi_off)
{
	size_t n = size < full_size ? size : full_size;
	uint32_t usize = (uint32_t)(n - uapi_off);

	kva_abi_out(out, size, full, full_size);
	memcpy(out, &n, sizeof(n));
	memcpy((char *)out + uapi_off, &usize, sizeof(usize));
}

/* Send msg and run the reply through parse; 0 or -errno. */
static int kva_nl_request(struct kva_nl *nl, struct nl_msg *msg,
			  int (*parse)(struct nlattr **, void *), void *ctx)
{
	struct kva_req req = { .nl = nl, .parse = parse, .ctx = ctx };
	struct nl_cb *cb = nl_cb_alloc(NL_CB_DEFAULT);
	int ret, sys_errno = 0;

	nl->error[0] = 0;
	if (!cb) {
		nlmsg_free(msg);
		return -ENOMEM;
	}
	nl_cb_err(cb, NL_CB_CUSTOM, kva_err_cb, &req);
	nl_cb_set(cb, NL_CB_VALID, NL_CB_CUSTOM, kva_valid_cb, &req);
	nl_cb_set(cb, NL_CB_FINISH, NL_CB_CUSTOM, kva_end_cb, &req);
	nl_cb_set(cb, NL_CB_ACK, NL_CB_CUSTOM, kva_end_cb, &req);
	errno = 0;
	ret = nl_send_auto(nl->sk, msg);
	if (ret < 0)
		sys_errno = errno;
	nlmsg_free(msg);
	/* A doit's reply and its ack may come in separate reads. */
	while (ret >= 0 && !req.done)
		ret = kva_nl_recv(nl->sk, cb, &sys_errno);
	nl_cb_put(cb);
	if (req.err)
		return req.err;
	return kva_nl_errno(ret, sys_errno);
}

static struct nl_msg *kva_nl_msg(struct kva_nl *nl, uint8_t cmd, int flags)
{
	struct nl_msg *msg = nlmsg_alloc();

	if (msg && !genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, nl->family, 0,
				flags | NLM_F_ACK, cmd, KVA_GENL_VERSION)) {
		nlmsg_free(msg);
		msg = NULL;
	}
	return msg;
}

static uint32_t u32_of(struct nlattr **tb, int a)
{
	return tb[a] ? nla_get_u32(tb[a]) : 0;
}

static uint64_t u64_of(struct nlattr **tb, int a)
{
	return tb[a] ? nla_get_u64(tb[a]) : 0;
}

static void kva_parse_arena(struct nlattr **tb, struct kva_nl_arena *a)
{
	struct kva_arena_info *i = &a->info;

	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	i->size = sizeof(*i);
	i->arena_id = u32_of(tb, KVA_NL_A_ARENA_ID);
	if (tb[KVA_NL_A_ARENA_NAME])
		snprintf(i->name, sizeof(i->name), "%s",
			 nla_get_string(tb[KVA_NL_A_ARENA_NAME]));
	i->tenant_id = u32_of(tb, KVA_NL_A_TENANT_ID);
	i->bytes = u64_of(tb, KVA_NL_A_BYTES);
	i->block_size = u32_of(tb, KVA_NL_A_BLOCK_SIZE);
	i->numa_node = (int32_t)u32_of(tb, KVA_NL_A_NUMA_NODE);
	i->blocks_total = u32_of(tb, KVA_NL_A_BLOCKS_TOTAL);
	i->blocks_free = u32_of(tb, KVA_NL_A_BLOCKS_FREE);
	i->blocks_per_page = i->block_size ?
			     (uint32_t)(KVA_PAGE_SIZE / i->block_size) : 0;
	i->sessions = u32_of(tb, KVA_NL_A_SESSIONS);
	i->sessions_ended = u64_of(tb, KVA_NL_A_SESSIONS_ENDED);
	i->dmabuf_attachments = u32_of(tb, KVA_NL_A_DMABUF_ATTACHMENTS);
	i->policy = u32_of(tb, KVA_NL_A_POLICY);
	i->low_wm = u32_of(tb, KVA_NL_A_LOW_WM);
	i->high_wm = u32_of(tb, KVA_NL_A_HIGH_WM);
	i->ttl_ms = u32_of(tb, KVA_NL_A_TTL_MS);
	i->events_posted = u64_of(tb, KVA_NL_A_EVENTS_POSTED);
	i->events_dropped = u64_of(tb, KVA_NL_A_EVENTS_DROPPED);
	a->fd_open = tb[KVA_NL_A_FD_OPEN] ? nla_get_u8(tb[KVA_NL_A_FD_OPEN]) : 0;
}

struct kva_arena_walk {
	int (*cb)(const struct kva_nl_arena *a, void *ctx);
	void *ctx;
	struct kva_nl_arena *one;
};

static int kva_arena_parse(struct nlattr **tb, void *ctx)
{
	struct kva_arena_walk *w = ctx;
	struct kva_nl_arena a;

	kva_parse_arena(tb, &a);
	if (w->one) {
		*w->one = a;
		return 0;
	}
	return w->cb(&a, w->ctx);
}

/* A caller's kva_nl_* record: size first, its UAPI record last. */
#define KVA_NL_VER0(type, member, ver0) (offsetof(type, member) + (ver0))

KVA_EXPORT int kva_nl_arena_get(struct kva_nl *nl, uint32_t arena_id,
				struct kva_nl_arena *out)
{
	struct kva_nl_arena full;
	struct kva_arena_walk w = { .one = &full };
	struct nl_msg *msg;
	int ret;

	ret = kva_abi_out_check(out, out ? out->size : 0,
				KVA_NL_VER0(struct kva_nl_arena, info,
					    KVA_ARENA_INFO_SIZE_VER0));
	if (ret)
		return ret;
	msg = kva_nl_msg(nl, KVA_NL_CMD_ARENA_GET, 0);
	if (!msg)
		return -ENOMEM;
	if (nla_put_u32(msg, KVA_NL_A_ARENA_ID, arena_id)) {
		nlmsg_free(msg);
		return -ENOMEM;
	}
	ret = kva_nl_request(nl, msg, kva_arena_parse, &w);
	if (!ret)
		kva_nl_out(out, out->size, &full, sizeof(full),
			   offsetof(struct kva_nl_arena, info));
	return ret;
}

KVA_EXPORT int kva_nl_arenas(struct kva_nl *nl,
			     int (*cb)(const struct kva_nl_arena *a, void *ctx),
			     void *ctx)
{
	struct kva_arena_walk w = { .cb = cb, .ctx = ctx };
	struct nl_msg *msg = kva_nl_msg(nl, KVA_NL_CMD_ARENA_GET, NLM_F_DUMP);

	if (!msg)
		return -ENOMEM;
	return kva_nl_request(nl, msg, kva_arena_parse, &w);
}

struct kva_session_walk {
	int (*cb)(const struct kva_nl_session *s, void *ctx);
	void *ctx;
};

static int kva_session_parse(struct nlattr **tb, void *ctx)
{
	struct kva_session_walk *w = ctx;
	struct kva_nl_session s;
	struct kva_session_info *i = &s.info;

	memset(&s, 0, sizeof(s));
	s.size = sizeof(s);
	s.arena_id = u32_of(tb, KVA_NL_A_ARENA_ID);
	i->size = sizeof(*i);
	i->session_id = u64_of(tb, KVA_NL_A_SESSION_ID);
	i->state = u32_of(tb, KVA_NL_A_STATE);
	i->tool_class = u32_of(tb, KVA_NL_A_TOOL_CLASS);
	i->blocks_held = u32_of(tb, KVA_NL_A_BLOCKS_HELD);
	i->expected_wait_us = u64_of(tb, KVA_NL_A_EXPECTED_WAIT_US);
	i->cookie = u64_of(tb, KVA_NL_A_COOKIE);
	i->created_ns = u64_of(tb, KVA_NL_A_CREATED_NS);
	i->state_since_ns = u64_of(tb, KVA_NL_A_STATE_SINCE_NS);
	i->transitions = u64_of(tb, KVA_NL_A_TRANSITIONS);
	i->idle_block_us = u64_of(tb, KVA_NL_A_IDLE_BLOCK_US);
	i->idle_byte_sec = u64_of(tb, KVA_NL_A_IDLE_BYTE_SEC);
	i->tier = u32_of(tb, KVA_NL_A_TIER);
	return w->cb(&s, w->ctx);
}

KVA_EXPORT int kva_nl_sessions(struct kva_nl *nl, uint32_t arena_id,
			       int (*cb)(const struct kva_nl_session *s,
					 void *ctx),
			       void *ctx)
{
	struct kva_session_walk w = { .cb = cb, .ctx = ctx };
	struct nl_msg *msg = kva_nl_msg(nl, KVA_NL_CMD_SESSION_GET, NLM_F_DUMP);

	if (!msg)
		return -ENOMEM;
	if (arena_id && nla_put_u32(msg, KVA_NL_A_ARENA_ID, arena_id)) {
		nlmsg_free(msg);
		return -ENOMEM;
	}
	return kva_nl_request(nl, msg, kva_session_parse, &w);
}

KVA_EXPORT int kva_nl_policy_set(struct kva_nl *nl, uint32_t arena_id,
				 uint32_t policy, uint32_t low_wm,
				 uint32_t high_wm, uint32_t ttl_ms)
{
	struct nl_msg *msg = kva_nl_msg(nl, KVA_NL_CMD_POLICY_SET, 0);

	if (!msg)
		return -ENOMEM;
	if (nla_put_u32(msg, KVA_NL_A_ARENA_ID, arena_id) ||
	    nla_put_u32(msg, KVA_NL_A_POLICY, policy) ||
	    (low_wm && nla_put_u32(msg, KVA_NL_A_LOW_WM, low_wm)) ||
	    (high_wm && nla_put_u32(msg, KVA_NL_A_HIGH_WM, high_wm)) ||
	    (ttl_ms && nla_put_u32(msg, KVA_NL_A_TTL_MS, ttl_ms))) {
		nlmsg_free(msg);
		return -ENOMEM;
	}
	return kva_nl_request(nl, msg, NULL, NULL);
}

KVA_EXPORT int kva_nl_raw(struct kva_nl *nl, uint8_t cmd, const void *attrs,
			  size_t len, int flags)
{
	struct nl_msg *msg = kva_nl_msg(nl, cmd, flags);

	if (!msg)
		return -ENOMEM;
	if (len && nlmsg_append(msg, (void *)attrs, len, NLMSG_ALIGNTO)) {
		nlmsg_free(msg);
		return -ENOMEM;
	}
	return kva_nl_request(nl, msg, NULL, NULL);
}

KVA_EXPORT int kva_nl_subscribe(struct kva_nl *nl)
{
	int ret;

	if (nl->ev)
		return 0;
	ret = genl_ctrl_resolve_grp(nl->sk, KVA_GENL_NAME,
				    KVA_GENL_MCGRP_EVENTS);
	if (ret < 0)
		return -ENOENT;
	nl->grp = ret;
	nl->ev = nl_socket_alloc();
	if (!nl->ev)
		return -ENOMEM;
	nl_socket_disable_seq_check(nl->ev);
	ret = genl_connect(nl->ev);
	if (!ret)
		ret = nl_socket_add_membership(nl->ev, nl->grp);
	if (ret) {
		nl_socket_free(nl->ev);
		nl->ev = NULL;
		return kva_nl_errno(ret, 0);
	}
	return 0;
}

struct kva_event_parse {
	struct kva_nl_event *out;
	int got;
};

static int kva_event_cb(struct nl_msg *msg, void *arg)
{
	struct kva_event_parse *p = arg;
	struct nlmsghdr *nlh = nlmsg_hdr(msg);
	struct genlmsghdr *gh = nlmsg_data(nlh);
	struct nlattr *tb[KVA_NL_A_MAX + 1], *a;
	struct kva_event *ev = &p->out->ev;
	int rem;

	if (genlmsg_parse(nlh, 0, tb, KVA_NL_A_MAX, NULL))
		return NL_SKIP;
	memset(p->out, 0, sizeof(*p->out));
	p->out->size = sizeof(*p->out);
	switch (gh->cmd) {
	case KVA_NL_CMD_EVENT: p->out->kind = KVA_NL_EV_EVENT; break;
	case KVA_NL_CMD_ARENA_NEW: p->out->kind = KVA_NL_EV_ARENA_NEW; break;
	case KVA_NL_CMD_ARENA_DEL: p->out->kind = KVA_NL_EV_ARENA_DEL; break;
	default: return NL_SKIP;
	}
	ev->size = sizeof(*ev);
	ev->type = u32_of(tb, KVA_NL_A_EVENT_TYPE);
	ev->seq = u64_of(tb, KVA_NL_A_EVENT_SEQ);
	ev->time_ns = u64_of(tb, KVA_NL_A_TIME_NS);
	ev->arena_id = u32_of(tb, KVA_NL_A_ARENA_ID);
	ev->session_id = u64_of(tb, KVA_NL_A_SESSION_ID);
	ev->tenant_id = u32_of(tb, KVA_NL_A_TENANT_ID);
	ev->blocks_free = u32_of(tb, KVA_NL_A_BLOCKS_FREE);
	ev->low_wm = u32_of(tb, KVA_NL_A_LOW_WM);
	ev->requested = u32_of(tb, KVA_NL_A_REQUESTED);
	ev->pid = u32_of(tb, KVA_NL_A_PID);
	/* netlink: the arena's events not multicast since this one's previous */
	ev->dropped = u64_of(tb, KVA_NL_A_DROPPED);
	p->out->bytes = u64_of(tb, KVA_NL_A_BYTES);
	if (tb[KVA_NL_A_ARENA_NAME])
		snprintf(p->out->name, sizeof(p->out->name), "%s",
			 nla_get_string(tb[KVA_NL_A_ARENA_NAME]));
	nlmsg_for_each_attr(a, nlh, GENL_HDRLEN, rem) {
		struct nlattr *vb[KVA_NL_A_MAX + 1];
		struct kva_victim *v;

		if (nla_type(a) != KVA_NL_A_VICTIM ||
		    ev->nvictims >= KVA_EVENT_MAX_VICTIMS ||
		    nla_parse_nested(vb, KVA_NL_A_MAX, a, NULL))
			continue;
		v = &ev->victims[ev->nvictims++];
		v->session_id = u64_of(vb, KVA_NL_A_SESSION_ID);
		v->state = u32_of(vb, KVA_NL_A_STATE);
		v->blocks_held = u32_of(vb, KVA_NL_A_BLOCKS_HELD);
		v->tool_class = u32_of(vb, KVA_NL_A_TOOL_CLASS);
		v->score = u64_of(vb, KVA_NL_A_SCORE);
		v->idle_ns = u64_of(vb, KVA_NL_A_IDLE_NS);
	}
	p->got = 1;
	return NL_STOP;
}

/* Multicast messages carry no sequence number of ours. */
static int kva_no_seq_check(struct nl_msg *msg, void *arg)
{
	(void)msg;
	(void)arg;
	return NL_OK;
}

KVA_EXPORT int kva_nl_next_event(struct kva_nl *nl, struct kva_nl_event *out,
				 int timeout_ms)
{
	struct kva_nl_event full;
	struct kva_event_parse p = { .out = &full };
	struct pollfd pfd;
	struct nl_cb *cb;
	int ret, sys_errno = 0;

	if (!nl->ev)
		return -EINVAL;
	ret = kva_abi_out_check(out, out ? out->size : 0,
				KVA_NL_VER0(struct kva_nl_event, ev,
					    KVA_EVENT_SIZE_VER0));
	if (ret)
		return ret;
	pfd.fd = nl_socket_get_fd(nl->ev);
	pfd.events = POLLIN;
	ret = poll(&pfd, 1, timeout_ms);
	if (ret <= 0)
		return ret < 0 ? -errno : 0;
	cb = nl_cb_alloc(NL_CB_DEFAULT);
	if (!cb)
		return -ENOMEM;
	nl_cb_set(cb, NL_CB_SEQ_CHECK, NL_CB_CUSTOM, kva_no_seq_check, NULL);
	nl_cb_set(cb, NL_CB_VALID, NL_CB_CUSTOM, kva_event_cb, &p);
	/* Skip what is not an event until one comes or the socket is dry. */
	do {
		ret = kva_nl_recv(nl->ev, cb, &sys_errno);
	} while (!p.got && ret >= 0 && poll(&pfd, 1, 0) > 0);
	nl_cb_put(cb);
	if (ret < 0 && !p.got)
		return kva_nl_errno(ret, sys_errno);
	if (!p.got)
		return -EAGAIN;
	kva_nl_out(out, out->size, &full, sizeof(full),
		   offsetof(struct kva_nl_event, ev));
	return 1;
}
