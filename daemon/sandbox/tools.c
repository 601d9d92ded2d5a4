// SPDX-License-Identifier: MIT
/*
 * tools.c - the built-in tools. sh and c_compile_run run in the sandbox
 * under the policy's "sh" and "c_compile_run" tools; read_file,
 * write_file and list_dir run in the launcher's process that holds the
 * work directories (the spawner when there is one: there they are its
 * mounts; no spawn) and are confined to the work directory by the
 * kernel's path resolution (openat2 RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
 * | RESOLVE_NO_XDEV), never by string checks.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox_internal.h"

int kvs_tool_sh(const struct kvs_policy *p, const char *workdir, const char *command,
		const struct kvs_limits *lim, struct kvs_result *res)
{
	const char *argv[] = { "/bin/sh", "-c", command, NULL };
	struct kvs_request req = {
		.tool = "sh", .workdir = workdir, .argv = argv, .limits = lim,
	};

	if (!command) {
		memset(res, 0, sizeof(*res));
		res->reason = KVS_EXIT_REFUSED;
		kvs_note(res->note, sizeof(res->note), "sh: no command");
		return -EINVAL;
	}
	return kvs_run(p, &req, res);
}

static int open_beneath(int dfd, const char *path, uint64_t flags, uint64_t mode)
{
	struct open_how how = {
		.flags = flags | O_CLOEXEC,
		.mode = mode,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
	};
	long fd = syscall(SYS_openat2, dfd, path, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

static const char *why(int err)
{
	switch (err) {
	case EXDEV: return "the path leads out of the work directory";
	case ELOOP: return "the path crosses a link it may not follow";
	case ENOENT: return "no such file";
	case EISDIR: return "a directory";
	case ENOTDIR: return "not a directory";
	case EFBIG: return "larger than the tool's cap";
	case EMLINK: return "a file with other hard links";
	case EINVAL: return "not a regular file";
	default: return strerror(err);
	}
}

static int file_fail(struct kvs_result *res, const char *tool, const char *path, int err)
{
	res->reason = KVS_EXIT_REFUSED;
	res->status = err;
	kvs_note(res->note, sizeof(res->note), "%s %s: %s", tool, path, why(err));
	if (!res->out)
		res->out = calloc(1, 1);
	if (!res->err)
		res->err = calloc(1, 1);
	return -err;
}

static int open_workdir(const char *workdir)
{
	int fd;

	if (!workdir || workdir[0] != '/')
		return -EINVAL;
	fd = open(workdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static uint64_t file_cap(const struct kvs_policy *p, const char *tool)
{
	const struct kvs_tool *t = kvs_find_tool(p, tool);

	return t ? t->output : 0;
}

int kvs_file_read(const struct kvs_policy *p, const char *workdir, const char *path,
		  struct kvs_result *res)
{
	uint64_t cap = file_cap(p, "read_file");
	struct stat st;
	int dfd, fd;
	size_t got = 0;

	memset(res, 0, sizeof(*res));
	if (!cap)
		return file_fail(res, "read_file", path ? path : "", ENOENT);
	if (!path || !*path)
		return file_fail(res, "read_file", "", EINVAL);
	dfd = open_workdir(workdir);
	if (dfd < 0)
		return file_fail(res, "read_file", workdir ? workdir : "", -dfd);
	fd = open_beneath(dfd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
	close(dfd);
	if (fd < 0)
		return file_fail(res, "read_file", path, -fd);
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return file_fail(res, "read_file", path, S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
	}
	res->out = malloc((st.st_size < (off_t)cap ? (size_t)st.st_size : cap) + 1);
	if (!res->out) {
		close(fd);
		return file_fail(res, "read_file", path, ENOMEM);
	}
	while (got < cap) {
		ssize_t n = read(fd, res->out + got, cap - got < 65536 ? cap - got : 65536);

		if (n <= 0)
			break;
		got += n;
		if (got >= (size_t)st.st_size && got < cap) {
			/* the file may have grown since fstat: size the buffer anew */
			char *nb = realloc(res->out, cap + 1);

			if (!nb)
				break;
			res->out = nb;
		}
	}
	if (got == cap) {
		char b;

		if (read(fd, &b, 1) == 1) {
			res->out_truncated = 1;
			res->reason = KVS_EXIT_OUTPUT_CAP;
			kvs_note(res->note, sizeof(res->note),
				 "read_file %s: truncated at the %llu-byte cap", path,
				 (unsigned long long)cap);
		}
	}
	close(fd);
	res->out[got] = 0;
	res->out_len = got;
	res->err = calloc(1, 1);
	return 0;
}

int kvs_file_write(const struct kvs_policy *p, const char *workdir, const char *path,
		   const void *data, size_t len, struct kvs_result *res)
{
	uint64_t cap = file_cap(p, "write_file");
	const char *s = data;
	struct stat st;
	size_t off = 0;
	int dfd, fd;

	memset(res, 0, sizeof(*res));
	if (!cap)
		return file_fail(res, "write_file", path ? path : "", ENOENT);
	if (!path || !*path)
		return file_fail(res, "write_file", "", EINVAL);
	if (len > cap)
		return file_fail(res, "write_file", path, EFBIG);
	dfd = open_workdir(workdir);
	if (dfd < 0)
		return file_fail(res, "write_file", workdir ? workdir : "", -dfd);
	/* no O_TRUNC before we know what we opened */
	fd = open_beneath(dfd, path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY,
			  0644);
	close(dfd);
	if (fd < 0)
		return file_fail(res, "write_file", path, -fd);
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
		close(fd);
		return file_fail(res, "write_file", path,
				 S_ISREG(st.st_mode) ? EMLINK : EINVAL);
	}
	if (ftruncate(fd, 0)) {
		int e = errno;

		close(fd);
		return file_fail(res, "write_file", path, e);
	}
	while (off < len) {
		ssize_t n = write(fd, s + off, len - off);

		if (n <= 0) {
			int e = n < 0 ? errno : EIO;

			close(fd);
			return file_fail(res, "write_file", path, e);
		}
		off += n;
	}
	if (p->privileged) {
		/* the work directory's owner: its session's uid, or the policy's */
		uid_t uid;
		gid_t gid;

		kvs_wd_ids(p, workdir, &uid, &gid);
		if (fchown(fd, uid, gid))
			kvs_note(res->note, sizeof(res->note), "write_file %s: chown: %s", path,
				 strerror(errno));
	}
	close(fd);
	res->out = calloc(1, 1);
	res->err = calloc(1, 1);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int kvs_file_list(const struct kvs_policy *p, const char *workdir, const char *path,
		  struct kvs_result *res)
{
	uint64_t cap = file_cap(p, "list_dir");
	struct dirent *de;
	char **names = NULL;
	size_t n = 0, alloc = 0, used = 0, i;
	DIR *d;
	int dfd, fd;

	memset(res, 0, sizeof(*res));
	if (!cap)
		return file_fail(res, "list_dir", path ? path : "", ENOENT);
	if (!path || !*path)
		path = ".";
	dfd = open_workdir(workdir);
	if (dfd < 0)
		return file_fail(res, "list_dir", workdir ? workdir : "", -dfd);
	fd = open_beneath(dfd, path, O_RDONLY | O_DIRECTORY, 0);
	close(dfd);
	if (fd < 0)
		return file_fail(res, "list_dir", path, -fd);
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return file_fail(res, "list_dir", path, errno);
	}
	while ((de = readdir(d))) {
		char line[300];
		const char *suf = de->d_type == DT_DIR ? "/" : de->d_type == DT_LNK ? "@" : "";

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (used > cap) {
			res->out_truncated = 1;
			break;
		}
		if (n == alloc) {
			char **nn = realloc(names, (alloc ? alloc * 2 : 64) * sizeof(*names));

			if (!nn)
				break;
			names = nn;
			alloc = alloc ? alloc * 2 : 64;
		}
		snprintf(line, sizeof(line), "%s%s\n", de->d_name, suf);
		names[n] = strdup(line);
		if (!names[n])
			break;
		used += strlen(line);
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), cmp_str);
	res->out = malloc(used + 1);
	if (res->out) {
		res->out_len = 0;
		for (i = 0; i < n; i++) {
			size_t l = strlen(names[i]);

			if (res->out_len + l > cap) {
				res->out_truncated = 1;
				break;
			}
			memcpy(res->out + res->out_len, names[i], l);
			res->out_len += l;
		}
		res->out[res->out_len] = 0;
	}
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (res->out_truncated) {
		res->reason = KVS_EXIT_OUTPUT_CAP;
		kvs_note(res->note, sizeof(res->note), "list_dir %s: truncated at the cap", path);
	}
	res->err = calloc(1, 1);
	return res->out ? 0 : -ENOMEM;
}

/* ---- through the spawner, where the work directories are its mounts ---- */

static int file_op(const struct kvs_policy *p, enum kvs_sp_op op, const char *workdir,
		   const char *path, const void *data, size_t len, struct kvs_result *res)
{
	const char *argv[] = { path, NULL };
	struct kvs_request req = { .workdir = workdir, .argv = path ? argv : NULL,
				   .stdin_data = data, .stdin_len = len };

	if (!workdir || workdir[0] != '/')
		return file_fail(res, op == KVS_SP_READ_FILE ? "read_file" : op ==
				 KVS_SP_WRITE_FILE ? "write_file" : "list_dir",
				 workdir ? workdir : "", EINVAL);
	return kvs_spawner_call(p, op, &req, 0, res);
}

int kvs_read_file(const struct kvs_policy *p, const char *workdir, const char *path,
		  struct kvs_result *res)
{
	if (p->spawner_fd < 0 || !path)
		return kvs_file_read(p, workdir, path, res);
	return file_op(p, KVS_SP_READ_FILE, workdir, path, NULL, 0, res);
}

int kvs_write_file(const struct kvs_policy *p, const char *workdir, const char *path,
		   const void *data, size_t len, struct kvs_result *res)
{
	if (p->spawner_fd < 0 || !path || len > KVS_MAX_STDIN)
		return kvs_file_write(p, workdir, path, data, len, res);
	return file_op(p, KVS_SP_WRITE_FILE, workdir, path, data, len, res);
}

int kvs_list_dir(const struct kvs_policy *p, const char *workdir, const char *path,
		 struct kvs_result *res)
{
	if (p->spawner_fd < 0)
		return kvs_file_list(p, workdir, path, res);
	return file_op(p, KVS_SP_LIST_DIR, workdir, path && *path ? path : ".", NULL, 0, res);
}

int kvs_workdir_setup(const struct kvs_policy *p, const char *workdir, uint64_t size,
		      char *err, size_t errlen)
{
	struct kvs_request req = { .workdir = workdir };
	struct kvs_result res;
	char canon[PATH_MAX];
	int rc, temp;

	if (!workdir)
		return -EINVAL;
	memset(&res, 0, sizeof(res));
	if (p->spawner_fd >= 0) {
		rc = kvs_spawner_call(p, KVS_SP_WD_SETUP, &req, size, &res);
		kvs_result_free(&res);
	} else {
		rc = kvs_wd_prepare(p, workdir, size, canon, &temp, res.note, sizeof(res.note));
	}
	if (err && errlen)
		snprintf(err, errlen, "%s", res.note);
	return rc;
}

int kvs_workdir_view(const struct kvs_policy *p, const char *workdir, char *out, size_t len)
{
	int n = p->spawner_fd >= 0 ? snprintf(out, len, "/proc/%d/root%s", (int)p->spawner_pid,
					      workdir) :
		snprintf(out, len, "%s", workdir);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int kvs_workdir_create(const struct kvs_policy *p, const char *workdir)
{
	return kvs_workdir_setup(p, workdir, 0, NULL, 0);
}

void kvs_workdir_remove(const struct kvs_policy *p, const char *workdir)
{
	struct kvs_request req = { .workdir = workdir };
	struct kvs_result res;

	if (!workdir)
		return;
	if (p->spawner_fd < 0) {
		kvs_wd_remove(p, workdir);
		return;
	}
	kvs_spawner_call(p, KVS_SP_WD_REMOVE, &req, 0, &res);
	kvs_result_free(&res);
}

int kvs_tool_c_compile_run(const struct kvs_policy *p, const char *workdir,
			   const char *source, size_t source_len,
			   const void *stdin_data, size_t stdin_len,
			   const struct kvs_limits *lim, struct kvs_result *res)
{
	return kvs_tool_c_compile_run_hook(p, workdir, source, source_len, stdin_data,
					   stdin_len, lim, NULL, NULL, res);
}

int kvs_tool_c_compile_run_hook(const struct kvs_policy *p, const char *workdir,
				const char *source, size_t source_len,
				const void *stdin_data, size_t stdin_len,
				const struct kvs_limits *lim,
				int (*on_cgroup)(void *ctx, uint64_t cgroup_id, pid_t pid),
				void *ctx, struct kvs_result *res)
{
	const char *cc[] = { "gcc", "-O1", "-o", KVS_WORK "/snippet", KVS_WORK "/snippet.c",
			     "-lm", NULL };
	const char *run[] = { KVS_WORK "/snippet", NULL };
	struct kvs_request req = { .tool = "c_compile_run", .limits = lim,
				   .on_cgroup = on_cgroup, .ctx = ctx };
	struct kvs_result wr;
	char tmpl[] = "/tmp/kvs-cc-XXXXXX";
	const char *wd = workdir;
	int rc;

	memset(res, 0, sizeof(*res));
	if (!wd) {
		if (!mkdtemp(tmpl))
			return -errno;
		rmdir(tmpl);	/* made again, as a work directory, just below */
		wd = tmpl;
	}
	rc = kvs_workdir_setup(p, wd, 0, res->note, sizeof(res->note));
	if (rc) {
		res->reason = KVS_EXIT_SETUP;
		res->out = calloc(1, 1);
		res->err = calloc(1, 1);
		return rc;
	}
	rc = kvs_write_file(p, wd, "snippet.c", source, source_len, &wr);
	if (rc) {
		*res = wr;
		goto out;
	}
	kvs_result_free(&wr);
	req.workdir = wd;
	req.argv = cc;
	rc = kvs_run(p, &req, res);
	if (rc || res->reason != KVS_EXIT_CODE || res->status != 0) {
		kvs_note(res->note, sizeof(res->note), "compilation failed");
		goto out;
	}
	kvs_result_free(res);
	req.argv = run;
	req.stdin_data = stdin_data;
	req.stdin_len = stdin_len;
	rc = kvs_run(p, &req, res);
out:
	if (!workdir)
		kvs_workdir_remove(p, tmpl);	/* and whatever the program left there */
	return rc;
}
