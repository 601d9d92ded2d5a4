// SPDX-License-Identifier: GPL-2.0
/*
 * The "kvarena" generic netlink family through libkvarena's kva_nl_*:
 * arena and session dumps match the ioctl view (10,000 sessions in one
 * multi-part dump), policy changes by arena id, malformed and oversized
 * requests refused with an extack message, and multicast events received
 * by a libnl subscriber.  Tests kmod/netlink.c.
 */
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/netlink.h>

#include "kt.h"

#define NSESS	10000

static struct kva_nl *nl;
static int dev = -1;

static int nl_init(void)
{
	dev = kt_dev_open();
	return dev < 0 || kva_nl_open(&nl) != 0;
}

static int nl_clean(void)
{
	kva_nl_close(nl);
	close(dev);
	return 0;
}

struct found {
	uint32_t want;
	int n;
	struct kva_nl_arena a;
};

static int arena_cb(const struct kva_nl_arena *a, void *ctx)
{
	struct found *f = ctx;

	f->n++;
	if (a->info.arena_id == f->want)
		f->a = *a;
	return 0;
}

static void test_arena_dump_matches_ioctl(void)
{
	struct kva_arena_create c = {
		.size = sizeof(c), .bytes = 6 * KT_MIB, .block_size = 128 << 10,
		.numa_node = KVA_NUMA_ANY, .tenant_id = 41, .name = "nl-a",
		.policy = KVA_POLICY_TTL, .low_wm = 5, .high_wm = 9, .ttl_ms = 777,
	};
	int64_t sid;
	int fd = kt_ioctl(dev, KVA_IOC_ARENA_CREATE, &c), fd2;
	struct kva_arena_info ai = { .size = sizeof(ai) };
	struct kva_nl_arena one = { .size = sizeof(one) };
	struct found f = { 0 };
	uint32_t ids[3];

	CU_ASSERT_FATAL(fd >= 0);
	c.name[3] = 'b';
	fd2 = kt_ioctl(dev, KVA_IOC_ARENA_CREATE, &c);
	CU_ASSERT_FATAL(fd2 >= 0);
	sid = kt_session(fd);
	CU_ASSERT_EQUAL(kt_alloc(fd, sid, 3, ids, 0), 3);
	CU_ASSERT_EQUAL(kt_arena_info(fd, &ai), 0);

	f.want = ai.arena_id;
	CU_ASSERT_EQUAL(kva_nl_arenas(nl, arena_cb, &f), 0);
	CU_ASSERT(f.n >= 2);
	CU_ASSERT_EQUAL(f.a.info.arena_id, ai.arena_id);
	CU_ASSERT_STRING_EQUAL(f.a.info.name, "nl-a");
	CU_ASSERT_EQUAL(f.a.info.tenant_id, 41);
	CU_ASSERT_EQUAL(f.a.info.bytes, ai.bytes);
	CU_ASSERT_EQUAL(f.a.info.block_size, ai.block_size);
	CU_ASSERT_EQUAL(f.a.info.blocks_total, ai.blocks_total);
	CU_ASSERT_EQUAL(f.a.info.blocks_free, ai.blocks_free);
	CU_ASSERT_EQUAL(f.a.info.sessions, 1);
	CU_ASSERT_EQUAL(f.a.info.policy, KVA_POLICY_TTL);
	CU_ASSERT_EQUAL(f.a.info.low_wm, 5);
	CU_ASSERT_EQUAL(f.a.info.high_wm, 9);
	CU_ASSERT_EQUAL(f.a.info.ttl_ms, 777);
	CU_ASSERT_EQUAL(f.a.fd_open, 1);

	CU_ASSERT_EQUAL(kva_nl_arena_get(nl, ai.arena_id, &one), 0);
	CU_ASSERT_EQUAL(one.info.blocks_free, ai.blocks_free);
	CU_ASSERT_EQUAL(kva_nl_arena_get(nl, 0x7ffffff0, &one), -ENOENT);
	CU_ASSERT_PTR_NOT_NULL(strstr(kva_nl_error(nl), "no arena"));

	/* Policy by id, as an operator without the fd would. */
	CU_ASSERT_EQUAL(kva_nl_policy_set(nl, ai.arena_id, KVA_POLICY_LRU, 2, 4, 0), 0);
	CU_ASSERT_EQUAL(kt_arena_info(fd, &ai), 0);
	CU_ASSERT_EQUAL(ai.policy, KVA_POLICY_LRU);
	CU_ASSERT_EQUAL(ai.low_wm, 2);
	CU_ASSERT_EQUAL(ai.high_wm, 4);
	CU_ASSERT_EQUAL(kva_nl_policy_set(nl, ai.arena_id, KVA_POLICY_LRU, 9, 4, 0), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(kva_nl_error(nl), "watermarks"));
	close(fd);
	close(fd2);
}

struct sess_walk {
	int fd;
	uint32_t arena;
	int n, mismatches, repeats, others;
	uint8_t seen[65536];
};

static int session_cb(const struct kva_nl_session *s, void *ctx)
{
	struct sess_walk *w = ctx;
	struct kva_session_info si = { .size = sizeof(si) };

	if (s->arena_id != w->arena) {
		w->others++;
		return 0;
	}
	w->n++;
	if (w->seen[s->info.session_id & 0xffff]++)
		w->repeats++;
	/* The id travels whole (a u64 attribute): the kernel knows it. */
	if (kt_session_info(w->fd, s->info.session_id, &si) ||
	    si.session_id != s->info.session_id ||
	    si.state != s->info.state || si.blocks_held != s->info.blocks_held ||
	    si.cookie != s->info.cookie || si.tool_class != s->info.tool_class ||
	    si.expected_wait_us != s->info.expected_wait_us ||
	    si.created_ns != s->info.created_ns ||
	    si.state_since_ns != s->info.state_since_ns ||
	    si.transitions != s->info.transitions || si.tier != s->info.tier)
		w->mismatches++;
	return 0;
}

static void test_dump_10k_sessions(void)
{
	struct kva_arena_create c = {
		.size = sizeof(c), .bytes = 64 * KT_MIB, .block_size = 4096,
		.numa_node = KVA_NUMA_ANY, .tenant_id = 42, .name = "nl-10k",
	};
	struct kva_session_create sc = { .size = sizeof(sc) };
	static struct sess_walk w;
	uint32_t ids[4];
	int fd = kt_ioctl(dev, KVA_IOC_ARENA_CREATE, &c), i;

	CU_ASSERT_FATAL(fd >= 0);
	for (i = 0; i < NSESS; i++) {
		sc.cookie = 1000000 + i;
		CU_ASSERT_FATAL(kt_ioctl(fd, KVA_IOC_SESSION_CREATE, &sc) == 0);
		CU_ASSERT_FATAL(sc.session_id > UINT32_MAX);
		if (i % 3 == 0)
			kt_alloc(fd, sc.session_id, 1 + i % 4, ids,
				 KVA_ALLOC_PARTIAL);
		if (i % 5 == 1)
			kt_set_state(fd, sc.session_id, KVA_STATE_TOOL_WAIT,
				     i % 7, 1000 * i);
	}
	w.fd = fd;
	w.arena = c.arena_id;
	CU_ASSERT_EQUAL(kva_nl_sessions(nl, c.arena_id, session_cb, &w), 0);
	if (w.n != NSESS)
		fprintf(stderr, "dump of arena %u: %d sessions, %d repeats, %d others\n",
			c.arena_id, w.n, w.repeats, w.others);
	CU_ASSERT_EQUAL(w.n, NSESS);
	CU_ASSERT_EQUAL(w.repeats, 0);
	CU_ASSERT_EQUAL(w.mismatches, 0);
	/* All arenas: the same sessions are among them. */
	w.n = 0;
	memset(w.seen, 0, sizeof(w.seen));
	CU_ASSERT_EQUAL(kva_nl_sessions(nl, 0, session_cb, &w), 0);
	CU_ASSERT_EQUAL(w.n, NSESS);
	close(fd);
}

/* Raw attributes, so that we can send what libkvarena never would. */
static size_t put_attr(char *buf, uint16_t type, const void *data,
		       uint16_t len)
{
	struct nlattr *a = (struct nlattr *)buf;

	a->nla_type = type;
	a->nla_len = NLA_HDRLEN + len;
	memcpy(buf + NLA_HDRLEN, data, len);
	return NLA_ALIGN(a->nla_len);
}

static void test_malformed_rejected(void)
{
	char buf[512];
	uint32_t v32 = 1, big = 99;
	uint8_t v8 = 1;
	size_t n;

	/* doit without its required attribute */
	CU_ASSERT_EQUAL(kva_nl_raw(nl, KVA_NL_CMD_ARENA_GET, NULL, 0, 0), -EINVAL);
	CU_ASSERT_PTR_NOT_NULL(strstr(kva_nl_error(nl), "ARENA_ID"));
	CU_ASSERT_EQUAL(kva_nl_raw(nl, KVA_NL_CMD_POLICY_SET, NULL, 0, 0), -EINVAL);
	CU_ASSERT(strlen(kva_nl_error(nl)) > 0);
	/* wrong size */
	n = put_attr(buf, KVA_NL_A_ARENA_ID, &v8, 1);
	CU_ASSERT(kva_nl_raw(nl, KVA_NL_CMD_ARENA_GET, buf, n, 0) < 0);
	CU_ASSERT(strlen(kva_nl_error(nl)) > 0);
	/* oversized: a u32 attribute carrying 300 bytes */
	memset(buf, 0, sizeof(buf));
	{
		char blob[300] = { 0 };

		n = put_attr(buf, KVA_NL_A_ARENA_ID, blob, sizeof(blob));
	}
	CU_ASSERT(kva_nl_raw(nl, KVA_NL_CMD_ARENA_GET, buf, n, 0) < 0);
	CU_ASSERT(strlen(kva_nl_error(nl)) > 0);
	/* out of range: arena id 0, policy 99 */
	n = put_attr(buf, KVA_NL_A_ARENA_ID, &(uint32_t){ 0 }, 4);
	CU_ASSERT(kva_nl_raw(nl, KVA_NL_CMD_ARENA_GET, buf, n, 0) < 0);
	CU_ASSERT(strlen(kva_nl_error(nl)) > 0);
	n = put_attr(buf, KVA_NL_A_ARENA_ID, &v32, 4);
	n += put_attr(buf + n, KVA_NL_A_POLICY, &big, 4);
	CU_ASSERT(kva_nl_raw(nl, KVA_NL_CMD_POLICY_SET, buf, n, 0) < 0);
	CU_ASSERT(strlen(kva_nl_error(nl)) > 0);
	/* attributes a request may not carry, and unknown ones */
	n = put_attr(buf, KVA_NL_A_BLOCKS_FREE, &v32, 4);
	CU_ASSERT(kva_nl_raw(nl, KVA_NL_CMD_ARENA_GET, buf, n, 0) < 0);
	CU_ASSERT(strlen(kva_nl_error(nl)) > 0);
	n = put_attr(buf, 200, &v32, 4);
	CU_ASSERT(kva_nl_raw(nl, KVA_NL_CMD_ARENA_GET, buf, n, 0) < 0);
	/* commands that are not requests, and unknown commands */
	CU_ASSERT(kva_nl_raw(nl, KVA_NL_CMD_EVENT, NULL, 0, 0) < 0);
	CU_ASSERT(kva_nl_raw(nl, 77, NULL, 0, 0) < 0);
	/* The family still serves. */
	CU_ASSERT_EQUAL(kva_nl_raw(nl, KVA_NL_CMD_ARENA_GET, NULL, 0, NLM_F_DUMP), 0);
}

static int next_of(struct kva_nl *sub, uint32_t kind, uint32_t type,
		   struct kva_nl_event *ev)
{
	int i;

	for (i = 0; i < 20; i++) {
		int ret = kva_nl_next_event(sub, ev, 2000);

		if (ret == -EAGAIN)
			continue;
		if (ret != 1)
			return -1;
		if (ev->kind == kind && (kind != KVA_NL_EV_EVENT || ev->ev.type == type))
			return 0;
	}
	return -1;
}

static void test_multicast(void)
{
	struct kva_arena_create c = {
		.size = sizeof(c), .bytes = 2 * KT_MIB, .block_size = 256 << 10,
		.numa_node = KVA_NUMA_ANY, .tenant_id = 43, .name = "nl-mc",
		.low_wm = 2,
	};
	struct kva_nl_event ev = { .size = sizeof(ev) };
	struct kva_nl *sub;
	uint32_t ids[8];
	int64_t a, x;
	int fd;

	CU_ASSERT_FATAL(kva_nl_open(&sub) == 0);
	CU_ASSERT_FATAL(kva_nl_subscribe(sub) == 0);
	fd = kt_ioctl(dev, KVA_IOC_ARENA_CREATE, &c);
	CU_ASSERT_FATAL(fd >= 0);
	CU_ASSERT_EQUAL_FATAL(next_of(sub, KVA_NL_EV_ARENA_NEW, 0, &ev), 0);
	CU_ASSERT_EQUAL(ev.ev.arena_id, c.arena_id);
	CU_ASSERT_STRING_EQUAL(ev.name, "nl-mc");
	CU_ASSERT_EQUAL(ev.bytes, 2 * KT_MIB);

	a = kt_session(fd);
	CU_ASSERT_EQUAL(kt_alloc(fd, a, 3, ids, 0), 3);
	CU_ASSERT_EQUAL(kt_set_state(fd, a, KVA_STATE_TOOL_WAIT, 6, 9000000), 0);
	x = kt_session(fd);
	CU_ASSERT_EQUAL(kt_set_state(fd, x, KVA_STATE_DECODE, 0, 0), 0);
	CU_ASSERT_EQUAL(kt_alloc(fd, x, 4, ids, 0), 4);		/* 1 free < 2 */
	CU_ASSERT_EQUAL_FATAL(next_of(sub, KVA_NL_EV_EVENT, KVA_EVENT_PRESSURE, &ev), 0);
	CU_ASSERT_EQUAL(ev.ev.arena_id, c.arena_id);
	CU_ASSERT_EQUAL(ev.ev.blocks_free, 1);
	CU_ASSERT_EQUAL_FATAL(ev.ev.nvictims, 1);
	CU_ASSERT_EQUAL(ev.ev.victims[0].session_id, (uint64_t)a);
	CU_ASSERT_EQUAL(ev.ev.victims[0].tool_class, 6);
	CU_ASSERT_EQUAL(ev.ev.victims[0].blocks_held, 3);

	CU_ASSERT_EQUAL(kt_end(fd, a), 0);
	CU_ASSERT_EQUAL_FATAL(next_of(sub, KVA_NL_EV_EVENT, KVA_EVENT_SESSION_ENDED, &ev), 0);
	CU_ASSERT_EQUAL(ev.ev.session_id, (uint64_t)a);
	CU_ASSERT_EQUAL(ev.ev.pid, (uint32_t)getpid());
	close(fd);
	CU_ASSERT_EQUAL_FATAL(next_of(sub, KVA_NL_EV_ARENA_DEL, 0, &ev), 0);
	CU_ASSERT_EQUAL(ev.ev.arena_id, c.arena_id);
	kva_nl_close(sub);
}

/* The whole family is for operators: CAP_NET_ADMIN. */
static void test_privileges(void)
{
	pid_t pid = fork();
	int st;

	CU_ASSERT_FATAL(pid >= 0);
	if (pid == 0) {
		struct __user_cap_header_struct h = {
			.version = _LINUX_CAPABILITY_VERSION_3,
		};
		struct __user_cap_data_struct d[2];
		struct kva_nl_arena one = { .size = sizeof(one) };
		struct kva_nl *n;
		int bad;

		syscall(SYS_capget, &h, d);
		d[0].effective &= ~(1U << CAP_NET_ADMIN);
		if (syscall(SYS_capset, &h, d) || kva_nl_open(&n))
			_exit(9);
		int r[4];

		r[0] = kva_nl_sessions(n, 0, NULL, NULL);
		r[1] = kva_nl_policy_set(n, 1, 0, 0, 0, 0);
		r[2] = kva_nl_subscribe(n);
		/* Arenas too: they name every user's tenants and usage. */
		r[3] = kva_nl_arena_get(n, 0x7ffffff0, &one);
		bad = (r[0] != -EPERM) + (r[1] != -EPERM) + (r[2] != -EPERM) +
		      (r[3] != -EPERM);
		if (bad)
			fprintf(stderr, "unprivileged: %d %d %d %d\n", r[0],
				r[1], r[2], r[3]);
		kva_nl_close(n);
		_exit(bad);
	}
	CU_ASSERT_EQUAL(waitpid(pid, &st, 0), pid);
	CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

void kt_register_netlink(void)
{
	CU_pSuite s = CU_add_suite("netlink", nl_init, nl_clean);

	KT_ADD(s, test_arena_dump_matches_ioctl);
	KT_ADD(s, test_dump_10k_sessions);
	KT_ADD(s, test_malformed_rejected);
	KT_ADD(s, test_multicast);
	KT_ADD(s, test_privileges);
}
