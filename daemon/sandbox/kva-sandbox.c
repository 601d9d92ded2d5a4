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
		"                   [--workdir-size SIZE] [--stdin FILE] [--timeout SEC]\n"
		"                   [--quiet] -- CMD [ARGS...]\n"
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

/* Length of the valid UTF-8 character at s (at most n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len, i;
	unsigned int cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

/*
 * The tool's bytes to a terminal: what is not printable text is shown as
 * \xHH instead of reaching the terminal, so a tool cannot move the cursor,
 * retitle the window, rewrite what was printed before it (\r, CSI, OSC) or
 * answer for the user. Newlines and tabs stay; valid UTF-8 stays but for
 * the C1 controls (U+0080..U+009F, CSI among them). To a file or pipe the
 * bytes go as they are.
 */
static void write_out(int fd, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0, start = 0;

	if (!isatty(fd)) {
		write_all(fd, s, n);
		return;
	}
	while (i < n) {
		size_t len = utf8_len(u + i, n - i);
		int bad = len == 0 || (len == 1 && u[i] < 0x20 && u[i] != '\n' && u[i] != '\t') ||
			  (len == 1 && u[i] == 0x7f) || (len == 2 && u[i] == 0xc2 && u[i + 1] < 0xa0);

		if (!bad) {
			i += len;
			continue;
		}
		write_all(fd, s + start, i - start);
		len = len ? len : 1;
		for (size_t k = 0; k < len; k++) {
			char e[4] = { '\\', 'x', hex[u[i + k] >> 4], hex[u[i + k] & 15] };

			write_all(fd, e, sizeof(e));
		}
		i += len;
		start = i;
	}
	write_all(fd, s + start, n - start);
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
		{ "workdir-size", required_argument, NULL, 'S' },
		{ "check", no_argument, NULL, 'c' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *policy = NULL, *tool = NULL, *workdir = NULL, *stdin_path = NULL;
	char err[1024] = "", cmdpath[PATH_MAX], wdabs[PATH_MAX], unenf[128] = "";
	struct kvs_policy *p = NULL;
	struct kvs_result r;
	struct kvs_limits lim = { 0 };
	char *in = NULL;
	size_t in_len = 0;
	int o, check = 0, quiet = 0, rc, code, session = 0;
	unsigned long long wd_size = 0;

	while ((o = getopt_long(argc, argv, "+p:t:w:i:T:S:cqh", opts, NULL)) != -1) {
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
		case 'S': {
			char *end;

			wd_size = strtoull(optarg, &end, 10);
			if (*end == 'K' || *end == 'k')
				wd_size <<= 10, end++;
			else if (*end == 'M' || *end == 'm')
				wd_size <<= 20, end++;
			else if (*end == 'G' || *end == 'g')
				wd_size <<= 30, end++;
			if (*end || !wd_size) {
				fprintf(stderr, "kva-sandbox: --workdir-size wants a size (16M)\n");
				return RC_USAGE;
			}
			session = 1;
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
	if (session) {
		/* a session work directory, as kvarenad's: through a spawner,
		 * which (as root) makes it a tmpfs of that size with a uid of
		 * its own; removed at the end, when this made it */
		struct stat st;

		if (!workdir) {
			snprintf(wdabs, sizeof(wdabs), "/tmp/kvs-session-XXXXXX");
			if (!mkdtemp(wdabs) || rmdir(wdabs)) {
				perror("kva-sandbox: mkdtemp");
				kvs_policy_free(p);
				return RC_SETUP;
			}
			workdir = wdabs;
		}
		if (stat(workdir, &st) == 0) {
			fprintf(stderr, "kva-sandbox: --workdir-size wants a --workdir that does not "
				"exist yet\n");
			kvs_policy_free(p);
			return RC_USAGE;
		}
		rc = kvs_policy_start_spawner(p);
		if (!rc)
			rc = kvs_workdir_setup(p, workdir, wd_size, err, sizeof(err));
		if (rc) {
			fprintf(stderr, "kva-sandbox: session work directory %s: %s\n", workdir,
				err[0] ? err : strerror(-rc));
			kvs_policy_free(p);
			return RC_SETUP;
		}
	}
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
		write_out(1, r.out, r.out_len);
	if (r.err)
		write_out(2, r.err, r.err_len);
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
	if (session)
		kvs_workdir_remove(p, workdir);
	kvs_policy_free(p);
	free(in);
	return code;
}
