// SPDX-License-Identifier: MIT
/*
 * spawner.c - a small process, forked from the caller while it is still
 * small, that makes the policy's runs on its behalf: clone3() without
 * CLONE_VM copies the calling process's page tables, so a daemon holding
 * gigabytes of private memory would pay milliseconds to hundreds of them on
 * every spawn; the spawner pays for its own small address space instead.
 *
 * A root launcher's spawner also owns the work directories: it runs in a
 * mount namespace of its own, where each is a tmpfs (workdir.c), so what
 * touches them goes through it too: making and removing one, and the
 * in-process file tools (read_file, write_file, list_dir).
 *
 * Protocol: the caller sends the spawner one end of a fresh stream
 * socketpair per operation over a SOCK_SEQPACKET control socket. On that
 * socket: the request (header with the operation and the stdin memfd as
 * SCM_RIGHTS, then tool, workdir and argv bytes); for a run the spawner
 * answers with HOOK messages (the run's cgroup id and pid, which the
 * caller passes to its on_cgroup hook and answers go or refuse); then one
 * RESULT (the kvs_result, then stdout and stderr bytes). The spawner
 * serves each operation on a thread of a pool that grows to the most
 * operations ever in flight at once and keeps its threads (a thread made
 * and ended per spawn cost its stack's pages again each time, and the
 * TLB shootdown of giving them back).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox_internal.h"

#define SP_MAGIC 0x4b565352u	/* "KVSR" */
enum { SP_HOOK = 1, SP_RESULT = 2 };

struct sp_req {
	uint32_t magic;
	uint32_t op;			/* enum kvs_sp_op */
	uint32_t tool_len, wd_len, argc, arg_bytes;
	uint32_t has_hook, has_lim, has_wd;
	uint64_t size;			/* KVS_SP_WD_SETUP */
	struct kvs_limits lim;
};

struct sp_hook {
	uint32_t type;
	int32_t pid;
	uint64_t cgroup_id;
};

struct sp_result {
	uint32_t type;
	int32_t rc;
	uint32_t reason, unenforced;
	int32_t status, out_trunc, err_trunc, pad;
	uint64_t out_len, err_len, cgroup_id, memory_peak;
	double setup_s, wall_s, cpu_user_s, cpu_sys_s;
	char note[KVS_NOTE_LEN];
};

static int read_full(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);

		if (r == 0)
			return -EPIPE;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		n -= r;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= w;
	}
	return 0;
}

static int send_fd(int sock, const void *buf, size_t len, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;

	memset(cbuf, 0, sizeof(cbuf));
	mh.msg_control = cbuf;
	mh.msg_controllen = sizeof(cbuf);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -EIO;
}

/* Exactly len bytes and at most one fd (-1 if none came). */
static int recv_fd(int sock, void *buf, size_t len, int *fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);

	*fd = -1;
	if (n <= 0)
		return n == 0 ? -EPIPE : -errno;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
		    cm->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(fd, CMSG_DATA(cm), sizeof(int));
	if ((size_t)n < len) {
		int rc = read_full(sock, (char *)buf + n, len - n);

		if (rc) {
			if (*fd >= 0)
				close(*fd);
			*fd = -1;
			return rc;
		}
	}
	return 0;
}

/* ---- in the spawner ------------------------------------------------- */

static const struct kvs_policy *sp_policy;
static pthread_mutex_t sp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sp_idle = PTHREAD_COND_INITIALIZER;
static int sp_active;		/* operations queued or being served */
/* the operations waiting for a thread (their sockets), and the threads */
#define SP_QUEUE 256
static pthread_cond_t sp_work = PTHREAD_COND_INITIALIZER;
static int sp_queue[SP_QUEUE];
static unsigned int sp_head, sp_len;
static int sp_waiting, sp_threads;

static int remote_hook(void *ctx, uint64_t cgroup_id, pid_t pid)
{
	int sock = *(int *)ctx;
	struct sp_hook h = { SP_HOOK, pid, cgroup_id };
	char verdict = 1;

	if (write_full(sock, &h, sizeof(h)) || read_full(sock, &verdict, 1))
		return 1;
	return verdict != 0;
}

/* The stdin memfd's bytes (write_file's content), at most max. */
static char *slurp_fd(int fd, size_t max, size_t *len)
{
	size_t cap = 4096;
	char *b = malloc(cap);

	*len = 0;
	while (b) {
		ssize_t n;

		if (*len == cap) {
			char *nb;

			if (cap > max)
				break;
			nb = realloc(b, cap * 2);
			if (!nb)
				break;
			b = nb;
			cap *= 2;
		}
		n = read(fd, b + *len, cap - *len);
		if (n == 0)
			return b;
		if (n < 0)
			break;
		*len += (size_t)n;
	}
	free(b);
	return NULL;
}

/* An operation other than a run, here where the work directories are. */
static int serve_op(const struct sp_req *q, const char *wd, const char *path, int stdin_fd,
		    struct kvs_result *res)
{
	char canon[PATH_MAX];
	size_t len;
	char *data;
	int rc, temp;

	memset(res, 0, sizeof(*res));
	switch (q->op) {
	case KVS_SP_WD_SETUP:
		rc = kvs_wd_prepare(sp_policy, wd, q->size, canon, &temp, res->note,
				    sizeof(res->note));
		if (rc)
			res->reason = KVS_EXIT_SETUP;
		return rc;
	case KVS_SP_WD_REMOVE:
		kvs_wd_remove(sp_policy, wd);
		return 0;
	case KVS_SP_READ_FILE:
		return kvs_file_read(sp_policy, wd, path, res);
	case KVS_SP_LIST_DIR:
		return kvs_file_list(sp_policy, wd, path, res);
	case KVS_SP_WRITE_FILE:
		data = stdin_fd >= 0 ? slurp_fd(stdin_fd, KVS_MAX_STDIN, &len) : NULL;
		if (!data) {
			res->reason = KVS_EXIT_SETUP;
			return -EIO;
		}
		rc = kvs_file_write(sp_policy, wd, path, data, len, res);
		free(data);
		return rc;
	}
	res->reason = KVS_EXIT_REFUSED;
	return -EINVAL;
}

static void serve(int sock)
{
	struct sp_req q;
	struct sp_result r;
	struct kvs_request req;
	struct kvs_result res;
	char *strs = NULL, tool[KVS_TOOL_NAME_MAX], *wd = NULL;
	const char **argv = NULL;
	int stdin_fd = -1, rc;
	uint32_t i;
	size_t off;

	if (recv_fd(sock, &q, sizeof(q), &stdin_fd) || q.magic != SP_MAGIC ||
	    q.op > KVS_SP_LIST_DIR || q.tool_len >= sizeof(tool) || q.wd_len >= PATH_MAX ||
	    q.argc > KVS_MAX_ARGS || q.arg_bytes > KVS_MAX_ARG_BYTES ||
	    (q.op == KVS_SP_RUN && (q.tool_len == 0 || q.argc == 0)) ||
	    (q.op != KVS_SP_RUN && !q.has_wd))
		goto out;
	strs = malloc((size_t)q.tool_len + q.wd_len + 1 + q.arg_bytes + 1);
	argv = calloc(q.argc + 1, sizeof(*argv));
	if (!strs || !argv || read_full(sock, strs, (size_t)q.tool_len + q.wd_len + q.arg_bytes))
		goto out;
	memcpy(tool, strs, q.tool_len);
	tool[q.tool_len] = 0;
	if (q.has_wd) {
		wd = strndup(strs + q.tool_len, q.wd_len);
		if (!wd)
			goto out;
	}
	/* the argv bytes are argc NUL-terminated strings */
	memmove(strs, strs + q.tool_len + q.wd_len, q.arg_bytes);
	strs[q.arg_bytes] = 0;
	for (i = 0, off = 0; i < q.argc; i++) {
		if (off >= q.arg_bytes)
			goto out;
		argv[i] = strs + off;
		off += strlen(strs + off) + 1;
	}
	if (off != q.arg_bytes)
		goto out;
	if (q.op != KVS_SP_RUN) {
		rc = serve_op(&q, wd, q.argc ? argv[0] : NULL, stdin_fd, &res);
	} else {
		memset(&req, 0, sizeof(req));
		req.tool = tool;
		req.workdir = wd;
		req.argv = argv;
		req.limits = q.has_lim ? &q.lim : NULL;
		req.on_cgroup = q.has_hook ? remote_hook : NULL;
		req.ctx = &sock;
		rc = kvs_run_direct(sp_policy, &req, &res, stdin_fd);
	}
	memset(&r, 0, sizeof(r));
	r.type = SP_RESULT;
	r.rc = rc;
	r.reason = res.reason;
	r.unenforced = res.unenforced;
	r.status = res.status;
	r.out_trunc = res.out_truncated;
	r.err_trunc = res.err_truncated;
	r.out_len = res.out ? res.out_len : 0;
	r.err_len = res.err ? res.err_len : 0;
	r.cgroup_id = res.cgroup_id;
	r.memory_peak = res.memory_peak;
	r.setup_s = res.setup_s;
	r.wall_s = res.wall_s;
	r.cpu_user_s = res.cpu_user_s;
	r.cpu_sys_s = res.cpu_sys_s;
	memcpy(r.note, res.note, sizeof(r.note));
	if (!write_full(sock, &r, sizeof(r)) && !write_full(sock, res.out, r.out_len))
		write_full(sock, res.err, r.err_len);
	kvs_result_free(&res);
out:
	if (stdin_fd >= 0)
		close(stdin_fd);
	free(wd);
	free(strs);
	free(argv);
	close(sock);
}

/* with sp_lock held: the next queued socket */
static int sp_pop(void)
{
	int fd = sp_queue[sp_head];

	sp_head = (sp_head + 1) % SP_QUEUE;
	sp_len--;
	return fd;
}

static void *serve_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&sp_lock);
	for (;;) {
		int fd;

		while (!sp_len) {
			sp_waiting++;
			pthread_cond_wait(&sp_work, &sp_lock);
			sp_waiting--;
		}
		fd = sp_pop();
		pthread_mutex_unlock(&sp_lock);
		serve(fd);
		pthread_mutex_lock(&sp_lock);
		if (--sp_active == 0)
			pthread_cond_signal(&sp_idle);
	}
	return NULL;
}

/* Hand an operation's socket to a waiting thread, or a new one. */
static void sp_dispatch(int fd, const pthread_attr_t *attr)
{
	pthread_t th;
	int inline_fd = -1;

	pthread_mutex_lock(&sp_lock);
	sp_active++;
	if (sp_len == SP_QUEUE) {
		inline_fd = fd;		/* 256 waiting: this one here */
	} else {
		sp_queue[(sp_head + sp_len) % SP_QUEUE] = fd;
		sp_len++;
		if (sp_waiting >= (int)sp_len)
			pthread_cond_signal(&sp_work);
		else if (pthread_create(&th, attr, serve_thread, NULL) == 0)
			sp_threads++;
		else if (!sp_threads)
			inline_fd = sp_pop();	/* no thread to take it */
	}
	pthread_mutex_unlock(&sp_lock);
	if (inline_fd >= 0) {
		serve(inline_fd);
		pthread_mutex_lock(&sp_lock);
		if (--sp_active == 0)
			pthread_cond_signal(&sp_idle);
		pthread_mutex_unlock(&sp_lock);
	}
}

static void __attribute__((noreturn)) spawner_main(const struct kvs_policy *p, int ctl,
						   pid_t parent)
{
	int keep[3] = { ctl, p->mntns_fd, -1 }, lo = 3, k, m;
	pthread_attr_t attr;

	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (getppid() != parent)
		_exit(0);
	kvs_netns_pool_reset();	/* the caller's, if it had one, is not ours */
	kvs_spawn_stacks_reset();
	/* a root launcher's work directories are mounts of this process
	 * alone: its own mount namespace, the host's mounts still coming in
	 * (slave), none going out, all gone when it ends */
	if (p->privileged && p->workdir_size && unshare(CLONE_NEWNS) == 0 &&
	    mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) == 0)
		((struct kvs_policy *)p)->private_mounts = 1;
	prctl(PR_SET_NAME, "kvs-spawner", 0, 0, 0);
	signal(SIGPIPE, SIG_IGN);
	/* none of the caller's descriptors but ours: a listening socket the
	 * daemon closes later must really close */
	for (k = 0; k < 3; k++)		/* ascending; -1s first */
		for (m = k + 1; m < 3; m++)
			if (keep[m] < keep[k]) {
				int x = keep[k];

				keep[k] = keep[m];
				keep[m] = x;
			}
	for (k = 0; k < 3; k++) {
		int upto = keep[k];

		if (upto >= lo) {
			if (upto > lo)
				syscall(SYS_close_range, lo, upto - 1, 0);
			lo = upto + 1;
		}
	}
	syscall(SYS_close_range, lo, ~0U, 0);
	sp_policy = p;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (;;) {
		char b1;
		int fd;

		if (recv_fd(ctl, &b1, 1, &fd))
			break;	/* the caller closed the policy, or died */
		if (fd >= 0)
			sp_dispatch(fd, &attr);
	}
	/* finish the runs under way: their cgroups are removed by them */
	pthread_mutex_lock(&sp_lock);
	while (sp_active)
		pthread_cond_wait(&sp_idle, &sp_lock);
	pthread_mutex_unlock(&sp_lock);
	_exit(0);
}

int kvs_policy_start_spawner(struct kvs_policy *p)
{
	int ctl[2];
	pid_t pid, self = getpid();

	if (p->spawner_fd >= 0)
		return 0;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl))
		return -errno;
	pid = fork();
	if (pid < 0) {
		int e = errno;

		close(ctl[0]);
		close(ctl[1]);
		return -e;
	}
	if (pid == 0) {
		close(ctl[0]);
		spawner_main(p, ctl[1], self);
	}
	close(ctl[1]);
	p->spawner_fd = ctl[0];
	p->spawner_pid = pid;
	return 0;
}

void kvs_spawner_stop(struct kvs_policy *p)
{
	if (p->spawner_fd < 0)
		return;
	close(p->spawner_fd);
	p->spawner_fd = -1;
	waitpid(p->spawner_pid, NULL, 0);
}

/* ---- in the caller -------------------------------------------------- */

static int gone(struct kvs_result *res, int rc)
{
	res->reason = KVS_EXIT_SETUP;
	kvs_note(res->note, sizeof(res->note), "the spawner process is gone (%s)",
		 strerror(-rc));
	return rc;
}

/* One operation through the spawner: req's tool, workdir, argv, stdin
 * and hook, as the spawner's kvs_run() or file tool gets them. */
int kvs_spawner_call(const struct kvs_policy *p, enum kvs_sp_op op, const struct kvs_request *req,
		     uint64_t size, struct kvs_result *res)
{
	struct sp_req q;
	struct sp_result r;
	size_t tool_len = 0, wd_len = 0, arg_bytes = 0;
	int sv[2], stdin_fd, rc = 0, i;
	char one = 1;

	memset(res, 0, sizeof(*res));
	for (i = 0; req->argv && req->argv[i]; i++)
		arg_bytes += strlen(req->argv[i]) + 1;
	if (req->tool)
		tool_len = strlen(req->tool);
	if (req->workdir)
		wd_len = strlen(req->workdir);
	if (wd_len >= PATH_MAX || tool_len >= KVS_TOOL_NAME_MAX || i > KVS_MAX_ARGS ||
	    arg_bytes > KVS_MAX_ARG_BYTES || req->stdin_len > KVS_MAX_STDIN) {
		res->reason = KVS_EXIT_REFUSED;
		kvs_note(res->note, sizeof(res->note), "request too large");
		res->out = calloc(1, 1);
		res->err = calloc(1, 1);
		return -E2BIG;
	}
	stdin_fd = kvs_make_stdin(req->stdin_data, req->stdin_len);
	if (stdin_fd < 0) {
		res->reason = KVS_EXIT_SETUP;
		return stdin_fd;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		rc = -errno;
		close(stdin_fd);
		res->reason = KVS_EXIT_SETUP;
		return rc;
	}
	rc = send_fd(p->spawner_fd, &one, 1, sv[1]);
	close(sv[1]);
	memset(&q, 0, sizeof(q));
	q.magic = SP_MAGIC;
	q.op = op;
	q.tool_len = tool_len;
	q.wd_len = wd_len;
	q.has_wd = req->workdir != NULL;
	q.argc = i;
	q.arg_bytes = arg_bytes;
	q.has_hook = req->on_cgroup != NULL;
	q.has_lim = req->limits != NULL;
	q.size = size;
	if (req->limits)
		q.lim = *req->limits;
	if (!rc)
		rc = send_fd(sv[0], &q, sizeof(q), stdin_fd);
	close(stdin_fd);
	if (!rc && tool_len)
		rc = write_full(sv[0], req->tool, tool_len);
	if (!rc && wd_len)
		rc = write_full(sv[0], req->workdir, wd_len);
	for (i = 0; !rc && req->argv && req->argv[i]; i++)
		rc = write_full(sv[0], req->argv[i], strlen(req->argv[i]) + 1);
	while (!rc) {
		uint32_t type;

		rc = read_full(sv[0], &type, sizeof(type));
		if (rc)
			break;
		if (type == SP_HOOK && req->on_cgroup) {
			struct sp_hook h;
			char verdict;

			rc = read_full(sv[0], (char *)&h + sizeof(type), sizeof(h) - sizeof(type));
			if (rc)
				break;
			verdict = req->on_cgroup(req->ctx, h.cgroup_id, h.pid) ? 1 : 0;
			rc = write_full(sv[0], &verdict, 1);
			continue;
		}
		if (type != SP_RESULT) {
			rc = -EBADMSG;
			break;
		}
		rc = read_full(sv[0], (char *)&r + sizeof(type), sizeof(r) - sizeof(type));
		if (rc)
			break;
		if (r.out_len > KVS_MAX_OUTPUT || r.err_len > KVS_MAX_OUTPUT) {
			rc = -EBADMSG;
			break;
		}
		res->out = malloc(r.out_len + 1);
		res->err = malloc(r.err_len + 1);
		if (!res->out || !res->err) {
			rc = -ENOMEM;
			break;
		}
		rc = read_full(sv[0], res->out, r.out_len);
		if (!rc)
			rc = read_full(sv[0], res->err, r.err_len);
		if (rc)
			break;
		res->out[r.out_len] = 0;
		res->err[r.err_len] = 0;
		res->out_len = r.out_len;
		res->err_len = r.err_len;
		res->reason = r.reason;
		res->unenforced = r.unenforced;
		res->status = r.status;
		res->out_truncated = r.out_trunc;
		res->err_truncated = r.err_trunc;
		res->cgroup_id = r.cgroup_id;
		res->memory_peak = r.memory_peak;
		res->setup_s = r.setup_s;
		res->wall_s = r.wall_s;
		res->cpu_user_s = r.cpu_user_s;
		res->cpu_sys_s = r.cpu_sys_s;
		memcpy(res->note, r.note, sizeof(res->note));
		res->note[sizeof(res->note) - 1] = 0;
		close(sv[0]);
		return r.rc;
	}
	close(sv[0]);
	free(res->out);
	free(res->err);
	res->out = calloc(1, 1);
	res->err = calloc(1, 1);
	res->out_len = res->err_len = 0;
	return gone(res, rc);
}

int kvs_spawner_run(const struct kvs_policy *p, const struct kvs_request *req,
		    struct kvs_result *res)
{
	size_t arg_bytes = 0;
	int i;

	if (!req->tool || !kvs_find_tool(p, req->tool) || !req->argv || !req->argv[0] ||
	    req->stdin_len > KVS_MAX_STDIN || (req->stdin_len && !req->stdin_data))
		return kvs_run_direct(p, req, res, -1);	/* the same refusals, here */
	for (i = 0; req->argv[i]; i++) {
		if (i >= KVS_MAX_ARGS)
			return kvs_run_direct(p, req, res, -1);
		arg_bytes += strlen(req->argv[i]) + 1;
	}
	if (arg_bytes > KVS_MAX_ARG_BYTES || (req->workdir && strlen(req->workdir) >= PATH_MAX))
		return kvs_run_direct(p, req, res, -1);
	return kvs_spawner_call(p, KVS_SP_RUN, req, 0, res);
}
