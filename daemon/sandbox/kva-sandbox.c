// SPDX-License-Identifier: MIT
/*
 * kva-sandbox - run one command the way kvarenad runs a tool: through the
 * launcher library, under a policy file's tool or the default
 * least-privilege policy. Prints the command's captured stdout and stderr,
 * then one line with the exit reason; exits with the command's status (or
 * a documented code for timeout, OOM, output cap, refusal and setup
 * failure). See kva-sandbox(1).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvsandbox.h"

enum {
	RC_OUTPUT_CAP = 122,
	RC_OOM = 123,
	RC_TIMEOUT = 124,
	RC_SETUP = 125,
	RC_REFUSED = 126,
	RC_USAGE = 2,
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kva-sandbox [--policy FILE] [--tool NAME] [--workdir DIR]\n"
		"                   [--stdin FILE] [--timeout SEC] [--quiet] -- CMD [ARGS...]\n"
		"       kva-sandbox --policy FILE --check\n"
		"Built-in tools: sh -- 'COMMAND'; c_compile_run -- FILE.c;\n"
		"read_file -- PATH; write_file -- PATH (data from --stdin); list_dir [-- PATH].\n"
		"Exit: the command's status; 128+N killed by signal N; %d timeout;\n"
		"%d OOM; %d output cap; %d refused by the policy; %d sandbox setup failed.\n",
		RC_TIMEOUT, RC_OOM, RC_OUTPUT_CAP, RC_REFUSED, RC_SETUP);
}

static char *slurp(const char *path, size_t max, size_t *len)
{
	int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
	size_t alloc = 65536;
	char *buf;

	*len = 0;
	if (fd < 0)
		return NULL;
	buf = malloc(alloc + 1);
	while (buf) {
		ssize_t n;

		if (*len == alloc) {
			char *nb;

			if (alloc >= max)
				break;
			alloc = alloc * 2 > max ? max : alloc * 2;
			nb = realloc(buf, alloc + 1);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
		}
		n = read(fd, buf + *len, alloc - *len);
		if (n < 0) {
			free(buf);
			buf = NULL;
			break;
		}
		if (n == 0) {
			buf[*len] = 0;
			break;
		}
		*len += n;
	}
	if (buf && *len == max) {
		char b;

		if (read(fd, &b, 1) == 1) {
			fprintf(stderr, "kva-sandbox: %s: larger than %zu bytes\n", path, max);
			free(buf);
			buf = NULL;
		}
	}
	if (fd > 0)
		close(fd);
	return buf;
}

/* CMD made absolute the way the default tool's path would find it. */
static int find_cmd(const char *cmd, char *out, size_t len)
{
	static const char *const dirs[] = { "/usr/bin", "/bin", "/usr/sbin", "/sbin" };
	char cand[PATH_MAX];
	size_t i;

	if (strchr(cmd, '/')) {
		if (!realpath(cmd, out))
			return -errno;
		return 0;
	}
	for (i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(cand, sizeof(cand), "%s/%s", dirs[i], cmd);
		if (access(cand, X_OK) == 0 && realpath(cand, out) && strlen(out) < len)
			return 0;
	}
	return -ENOENT;
}

static void write_all(int fd, const char *s, size_t n)
{
	while (n) {
		ssize_t w = write(fd, s, n);

		if (w <= 0)
			return;
		s += w;
		n -= w;
	}
}

static int exit_code(const struct kvs_result *r)
{
	switch (r->reason) {
	case KVS_EXIT_CODE: return r->status;
	case KVS_EXIT_SIGNAL: return 128 + r->status;
	case KVS_EXIT_TIMEOUT: return RC_TIMEOUT;
	case KVS_EXIT_OOM: return RC_OOM;
	case KVS_EXIT_OUTPUT_CAP: return RC_OUTPUT_CAP;
	case KVS_EXIT_SETUP: return RC_SETUP;
	case KVS_EXIT_REFUSED: return RC_REFUSED;
	}
	return RC_SETUP;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "policy", required_argument, NULL, 'p' },
		{ "tool", required_argument, NULL, 't' },
		{ "workdir", required_argument, NULL, 'w' },
		{ "stdin", required_argument, NULL, 'i' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "check", no_argument, NULL, 'c' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *policy = NULL, *tool = NULL, *workdir = NULL, *stdin_path = NULL;
	char err[1024], cmdpath[PATH_MAX], wdabs[PATH_MAX], unenf[128] = "";
	struct kvs_policy *p = NULL;
	struct kvs_result r;
	struct kvs_limits lim = { 0 };
	char *in = NULL;
	size_t in_len = 0;
	int o, check = 0, quiet = 0, rc, code;

	while ((o = getopt_long(argc, argv, "+p:t:w:i:T:cqh", opts, NULL)) != -1) {
		switch (o) {
		case 'p': policy = optarg; break;
		case 't': tool = optarg; break;
		case 'w': workdir = optarg; break;
		case 'i': stdin_path = optarg; break;
		case 'T': {
			char *end;
			double s = strtod(optarg, &end);

			if (*end || !(s > 0 && s <= 3600)) {
				fprintf(stderr, "kva-sandbox: --timeout wants 0 < SEC <= 3600\n");
				return RC_USAGE;
			}
			lim.timeout_ms = (uint32_t)(s * 1000);
			break;
		}
		case 'c': check = 1; break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return RC_USAGE;
		}
	}
	if (workdir && workdir[0] != '/') {
		if (!getcwd(wdabs, sizeof(wdabs) - strlen(workdir) - 2)) {
			perror("kva-sandbox: getcwd");
			return RC_USAGE;
		}
		strcat(wdabs, "/");
		strcat(wdabs, workdir);
		workdir = wdabs;
	}
	if (check) {
		if (!policy) {
			fprintf(stderr, "kva-sandbox: --check needs --policy\n");
			return RC_USAGE;
		}
		rc = kvs_policy_load(policy, &p, err, sizeof(err));
		if (rc) {
			fprintf(stderr, "kva-sandbox: %s\n", err);
			return RC_REFUSED;
		}
		printf("%s: ok\n", policy);
		if (kvs_policy_host_notes(p)[0])
			printf("host: %s\n", kvs_policy_host_notes(p));
		kvs_policy_free(p);
		return 0;
	}
	if (optind >= argc && !(tool && !strcmp(tool, "list_dir"))) {
		usage(stderr);
		return RC_USAGE;
	}
	/* a relative CMD with a slash names a host file: make it absolute */
	if (optind < argc && strchr(argv[optind], '/') && argv[optind][0] != '/' &&
	    (!tool || (strcmp(tool, "read_file") && strcmp(tool, "write_file") &&
		       strcmp(tool, "list_dir") && strcmp(tool, "sh")))) {
		if (!realpath(argv[optind], cmdpath)) {
			fprintf(stderr, "kva-sandbox: %s: %s\n", argv[optind], strerror(errno));
			return 127;
		}
		argv[optind] = cmdpath;
	}
	if (policy) {
		rc = kvs_policy_load(policy, &p, err, sizeof(err));
	} else {
		const char *extra[2] = { NULL, NULL };

		if ((!tool || !strcmp(tool, "default")) && optind < argc) {
			if (argv[optind] != cmdpath &&
			    find_cmd(argv[optind], cmdpath, sizeof(cmdpath))) {
				fprintf(stderr, "kva-sandbox: %s: command not found\n", argv[optind]);
				return 127;
			}
			extra[0] = cmdpath;
		}
		rc = kvs_policy_default(extra, &p, err, sizeof(err));
	}
	if (rc) {
		fprintf(stderr, "kva-sandbox: %s\n", err);
		return RC_REFUSED;
	}
	if (!tool)
		tool = "default";
	if (!quiet && kvs_policy_host_notes(p)[0])
		fprintf(stderr, "kva-sandbox: note: %s\n", kvs_policy_host_notes(p));
	if (stdin_path) {
		in = slurp(stdin_path, 16u << 20, &in_len);
		if (!in) {
			fprintf(stderr, "kva-sandbox: --stdin %s: cannot read\n", stdin_path);
			kvs_policy_free(p);
			return RC_USAGE;
		}
	}

	if (!strcmp(tool, "sh")) {
		if (argc - optind != 1) {
			fprintf(stderr, "kva-sandbox: sh takes one command string\n");
			rc = -EINVAL;
			memset(&r, 0, sizeof(r));
			r.reason = KVS_EXIT_REFUSED;
		} else {
			rc = kvs_tool_sh(p, workdir, argv[optind], &lim, &r);
		}
	} else if (!strcmp(tool, "c_compile_run")) {
		size_t src_len;
		char *src = argc - optind == 1 ? slurp(argv[optind], 1u << 20, &src_len) : NULL;

		if (!src) {
			fprintf(stderr, "kva-sandbox: c_compile_run takes one readable C file\n");
			kvs_policy_free(p);
			free(in);
			return RC_USAGE;
		}
		rc = kvs_tool_c_compile_run(p, workdir, src, src_len, in, in_len, &lim, &r);
		free(src);
	} else if (!strcmp(tool, "read_file") || !strcmp(tool, "write_file") ||
		   !strcmp(tool, "list_dir")) {
		if (!workdir) {
			fprintf(stderr, "kva-sandbox: %s needs --workdir\n", tool);
			kvs_policy_free(p);
			free(in);
			return RC_USAGE;
		}
		if (tool[0] == 'r')
			rc = kvs_read_file(p, workdir, argv[optind], &r);
		else if (tool[0] == 'w')
			rc = kvs_write_file(p, workdir, argv[optind], in ? in : "", in_len, &r);
		else
			rc = kvs_list_dir(p, workdir, optind < argc ? argv[optind] : ".", &r);
	} else {
		struct kvs_request req = {
			.tool = tool, .workdir = workdir,
			.argv = (const char *const *)&argv[optind],
			.stdin_data = in, .stdin_len = in_len, .limits = &lim,
		};

		rc = kvs_run(p, &req, &r);
	}
	(void)rc;
	if (r.out)
		write_all(1, r.out, r.out_len);
	if (r.err)
		write_all(2, r.err, r.err_len);
	code = exit_code(&r);
	if (r.unenforced) {
		static const char *const names[] = { "landlock", "cgroup", "cpu", "memory", "pids" };
		size_t k, used = 0;

		for (k = 0; k < 5; k++)
			if (r.unenforced & (1u << k))
				used += snprintf(unenf + used, sizeof(unenf) - used, "%s%s",
						 used ? "," : " unenforced=", names[k]);
	}
	fprintf(stderr, "kva-sandbox: tool=%s reason=%s status=%d exit=%d cgroup=%llu "
		"setup=%.4fs wall=%.4fs cpu=%.3fs%s%s%s%s\n", tool, kvs_exit_name(r.reason),
		r.status, code, (unsigned long long)r.cgroup_id, r.setup_s, r.wall_s,
		r.cpu_user_s + r.cpu_sys_s, unenf, r.out_truncated || r.err_truncated ? " truncated" : "",
		r.note[0] ? " note: " : "", r.note);
	kvs_result_free(&r);
	kvs_policy_free(p);
	free(in);
	return code;
}
