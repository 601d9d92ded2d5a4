// SPDX-License-Identifier: MIT
/*
 * policy.c - the tool policy: the INI file (libinih), the built-in tools'
 * defaults, and compiling a tool once into what a spawn needs (the root's
 * skeleton, its bind mounts, its Landlock rules, its environment).
 * Nothing here runs per spawn.
 *
 * Least privilege: a tool section starts with nothing executable, no
 * system paths but the shared libraries (system_libs = yes), no network,
 * and small limits; a tool the policy does not name is refused.
 */
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox_internal.h"

#define POLICY_FILE_MAX (256u << 10)

static const char *const merged_usr_links[] = {
	"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
};

static const char *const system_lib_dirs[] = {
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
	"/usr/lib64", "/etc/ld.so.cache",
};

static const char *const ld_so_candidates[] = {
	"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1",
};

static const char *const dev_nodes[] = {
	"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
};

static void tool_defaults(struct kvs_tool *t, const char *name)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	snprintf(t->path, sizeof(t->path), "/usr/bin:/bin");
	t->system_libs = 1;
	t->cpu_millicores = 1000;
	t->memory = 256ull << 20;
	t->pids = 32;
	t->timeout_ms = 10000;
	t->output = 1ull << 20;
	t->tmp_bytes = 16ull << 20;
	t->nofile = 256;
	t->fsize = 64ull << 20;
}

static int list_add(char **list, int *n, const char *val, char *err, size_t errlen,
		    const char *what)
{
	if (*n >= KVS_MAX_PATHS) {
		snprintf(err, errlen, "%s: more than %d entries", what, KVS_MAX_PATHS);
		return -E2BIG;
	}
	list[*n] = strdup(val);
	if (!list[*n])
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* Space-separated absolute paths, each at most KVS_PATH-1 bytes. */
static int add_paths(char **list, int *n, const char *val, char *err, size_t errlen,
		     const char *what)
{
	char buf[2048], *save = NULL, *tok;
	int rc;

	if (strlen(val) >= sizeof(buf)) {
		snprintf(err, errlen, "%s: value too long", what);
		return -E2BIG;
	}
	strcpy(buf, val);
	for (tok = strtok_r(buf, " \t,", &save); tok; tok = strtok_r(NULL, " \t,", &save)) {
		if (tok[0] != '/') {
			snprintf(err, errlen, "%s: '%s' is not an absolute path", what, tok);
			return -EINVAL;
		}
		if (strlen(tok) >= KVS_PATH - 8) {
			snprintf(err, errlen, "%s: path too long", what);
			return -ENAMETOOLONG;
		}
		rc = list_add(list, n, tok, err, errlen, what);
		if (rc)
			return rc;
	}
	return 0;
}

static int parse_bool(const char *v, int *out)
{
	if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "on"))
		*out = 1;
	else if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "off"))
		*out = 0;
	else
		return -EINVAL;
	return 0;
}

static int parse_u32(const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	unsigned long x;

	if (!*v || *v == '-')
		return -EINVAL;
	errno = 0;
	x = strtoul(v, &end, 10);
	if (errno || *end || x < lo || x > hi)
		return -ERANGE;
	*out = (uint32_t)x;
	return 0;
}

/* "1.5" cores -> 1500 millicores; 0.01 .. 256 cores. */
static int parse_cores(const char *v, uint32_t *out)
{
	char *end;
	double d;

	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end || !(d >= 0.01 && d <= 256))
		return -ERANGE;
	*out = (uint32_t)(d * 1000 + 0.5);
	return 0;
}

/* "30", "30s", "500ms", "2m" */
static int parse_duration_ms(const char *v, uint32_t *out)
{
	char *end;
	unsigned long long x;
	uint64_t ms;

	if (!*v || *v == '-')
		return -EINVAL;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || end == v)
		return -EINVAL;
	if (!*end || !strcmp(end, "s"))
		ms = x * 1000;
	else if (!strcmp(end, "ms"))
		ms = x;
	else if (!strcmp(end, "m"))
		ms = x * 60000;
	else
		return -EINVAL;
	if (ms == 0 || ms > KVS_MAX_TIMEOUT_MS || x > KVS_MAX_TIMEOUT_MS)
		return -ERANGE;
	*out = (uint32_t)ms;
	return 0;
}

struct parse_state {
	struct kvs_policy *p;
	char err[512];
	int seen[KVS_MAX_TOOLS];	/* tool defined by this file already */
};

static void tool_free(struct kvs_tool *t)
{
	int i;

	if (!t)
		return;
	for (i = 0; i < t->n_exec; i++)
		free(t->exec[i]);
	for (i = 0; i < t->n_ro; i++)
		free(t->ro[i]);
	for (i = 0; i < t->n_rw; i++)
		free(t->rw[i]);
	for (i = 0; i < t->n_env; i++)
		free(t->env[i]);
	for (i = 0; t->envp[i]; i++)
		free(t->envp[i]);
	free(t->skel);
	free(t);
}

static int valid_tool_name(const char *s)
{
	size_t i, n = strlen(s);

	if (n == 0 || n >= KVS_TOOL_NAME_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-' || s[i] == '.'))
			return 0;
	return 1;
}

/* The tool a section names, created (least privilege) on first sight; a
 * built-in of the same name is replaced, not amended. */
static struct kvs_tool *section_tool(struct parse_state *st, const char *name)
{
	struct kvs_policy *p = st->p;
	struct kvs_tool *t;
	int i;

	for (i = 0; i < p->n_tools; i++) {
		if (strcmp(p->tools[i]->name, name))
			continue;
		if (st->seen[i])
			return p->tools[i];
		tool_free(p->tools[i]);
		p->tools[i] = calloc(1, sizeof(*t));
		if (!p->tools[i])
			return NULL;
		tool_defaults(p->tools[i], name);
		st->seen[i] = 1;
		return p->tools[i];
	}
	if (p->n_tools >= KVS_MAX_TOOLS) {
		snprintf(st->err, sizeof(st->err), "more than %d tools", KVS_MAX_TOOLS);
		return NULL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	tool_defaults(t, name);
	st->seen[p->n_tools] = 1;
	p->tools[p->n_tools++] = t;
	return t;
}

static int global_key(struct parse_state *st, const char *k, const char *v)
{
	struct kvs_policy *p = st->p;
	uint32_t x;

	if (!strcmp(k, "uid") || !strcmp(k, "gid")) {
		if (parse_u32(v, 1, 0xfffffffe, &x)) {
			snprintf(st->err, sizeof(st->err), "%s: want a nonzero id", k);
			return 0;
		}
		if (k[0] == 'u')
			p->uid = x;
		else
			p->gid = x;
		return 1;
	}
	if (!strcmp(k, "uid_range")) {
		unsigned long long base, count;
		char extra;

		if (!strcmp(v, "none")) {
			p->uid_count = 0;
			return 1;
		}
		if (sscanf(v, "%llu %llu %c", &base, &count, &extra) != 2 || !base || !count ||
		    count > (1u << 20) || base + count > 0xfffffffeull) {
			snprintf(st->err, sizeof(st->err),
				 "uid_range: want BASE COUNT (a uid per work directory) or none");
			return 0;
		}
		p->uid_base = (uid_t)base;
		p->uid_count = (uint32_t)count;
		return 1;
	}
	if (!strcmp(k, "workdir_size")) {
		uint64_t sz;

		if (kvs_parse_size(v, &sz) || (sz && sz < (1u << 20))) {
			snprintf(st->err, sizeof(st->err),
				 "workdir_size: want a size of at least 1M, or 0 (plain directories)");
			return 0;
		}
		p->workdir_size = sz;
		return 1;
	}
	if (!strcmp(k, "workdir_inodes")) {
		if (parse_u32(v, 64, 1u << 24, &x)) {
			snprintf(st->err, sizeof(st->err), "workdir_inodes: want 64 .. 16777216");
			return 0;
		}
		p->workdir_inodes = x;
		return 1;
	}
	if (!strcmp(k, "without_memory_controller")) {
		if (!strcmp(v, "restrict"))
			p->without_memcg = KVS_NOMEM_RESTRICT;
		else if (!strcmp(v, "refuse"))
			p->without_memcg = KVS_NOMEM_REFUSE;
		else {
			snprintf(st->err, sizeof(st->err),
				 "without_memory_controller: want restrict or refuse");
			return 0;
		}
		return 1;
	}
	if (!strcmp(k, "cgroup_parent")) {
		if (v[0] != '/' || strlen(v) >= sizeof(p->cgroup_parent) || strstr(v, "/..")) {
			snprintf(st->err, sizeof(st->err), "cgroup_parent: want an absolute path");
			return 0;
		}
		snprintf(p->cgroup_parent, sizeof(p->cgroup_parent), "%s", v);
		return 1;
	}
	snprintf(st->err, sizeof(st->err), "[sandbox]: unknown key '%s'", k);
	return 0;
}

static int tool_key(struct parse_state *st, struct kvs_tool *t, const char *k, const char *v)
{
	char *e = st->err;
	size_t el = sizeof(st->err);
	uint64_t sz;
	int rc = 0;

	if (!strcmp(k, "exec"))
		rc = add_paths(t->exec, &t->n_exec, v, e, el, "exec");
	else if (!strcmp(k, "ro"))
		rc = add_paths(t->ro, &t->n_ro, v, e, el, "ro");
	else if (!strcmp(k, "writable"))
		rc = add_paths(t->rw, &t->n_rw, v, e, el, "writable");
	else if (!strcmp(k, "network"))
		rc = parse_bool(v, &t->network);
	else if (!strcmp(k, "exec_workdir"))
		rc = parse_bool(v, &t->exec_workdir);
	else if (!strcmp(k, "system_libs"))
		rc = parse_bool(v, &t->system_libs);
	else if (!strcmp(k, "cpu"))
		rc = parse_cores(v, &t->cpu_millicores);
	else if (!strcmp(k, "memory")) {
		rc = kvs_parse_size(v, &sz);
		if (!rc && sz < (4u << 20))
			rc = -ERANGE;
		t->memory = sz;
	} else if (!strcmp(k, "pids"))
		rc = parse_u32(v, 1, 65536, &t->pids);
	else if (!strcmp(k, "timeout"))
		rc = parse_duration_ms(v, &t->timeout_ms);
	else if (!strcmp(k, "output")) {
		rc = kvs_parse_size(v, &sz);
		if (!rc && (sz == 0 || sz > KVS_MAX_OUTPUT))
			rc = -ERANGE;
		t->output = sz;
	} else if (!strcmp(k, "tmp")) {
		rc = kvs_parse_size(v, &sz);
		if (!rc && sz > (4ull << 30))
			rc = -ERANGE;
		t->tmp_bytes = sz;
	} else if (!strcmp(k, "nofile")) {
		rc = parse_u32(v, 16, 65536, &t->nofile);
		t->nofile_set = 1;
	}
	else if (!strcmp(k, "file_size")) {
		rc = kvs_parse_size(v, &sz);
		t->fsize = sz;
	} else if (!strcmp(k, "path")) {
		if (strlen(v) >= sizeof(t->path) || v[0] != '/')
			rc = -EINVAL;
		else
			snprintf(t->path, sizeof(t->path), "%s", v);
	} else if (!strcmp(k, "env")) {
		if (!strchr(v, '=') || v[0] == '=' || strlen(v) > 1024)
			rc = -EINVAL;
		else
			rc = list_add(t->env, &t->n_env, v, e, el, "env");
	} else {
		snprintf(e, el, "[%s]: unknown key '%s'", t->name, k);
		return 0;
	}
	if (rc && !st->err[0])
		snprintf(e, el, "[%s]: bad value for %s: '%s'", t->name, k, v);
	return rc == 0;
}

static int policy_ini_line(void *user, const char *section, const char *k, const char *v)
{
	struct parse_state *st = user;
	struct kvs_tool *t;

	if (st->err[0])
		return 0;
	if (!section[0]) {
		snprintf(st->err, sizeof(st->err), "key '%s' outside a section", k);
		return 0;
	}
	if (!strcmp(section, "sandbox"))
		return global_key(st, k, v);
	if (!valid_tool_name(section)) {
		snprintf(st->err, sizeof(st->err), "bad tool name [%s]", section);
		return 0;
	}
	if (!strcmp(section, "read_file") || !strcmp(section, "write_file") ||
	    !strcmp(section, "list_dir")) {
		if (strcmp(k, "output")) {
			snprintf(st->err, sizeof(st->err),
				 "[%s]: a file tool has only 'output' (its size cap)", section);
			return 0;
		}
	}
	t = section_tool(st, section);
	if (!t) {
		if (!st->err[0])
			snprintf(st->err, sizeof(st->err), "out of memory");
		return 0;
	}
	return tool_key(st, t, k, v);
}

/* ---- built-in tools ------------------------------------------------- */

static int add_builtin(struct kvs_policy *p, const char *name, const char *exec,
		       const char *ro, int exec_workdir, uint32_t timeout_ms,
		       uint64_t memory, uint32_t pids, uint64_t output)
{
	struct kvs_tool *t = calloc(1, sizeof(*t));
	char err[128];

	if (!t)
		return -ENOMEM;
	tool_defaults(t, name);
	t->builtin = 1;
	t->exec_workdir = exec_workdir;
	t->timeout_ms = timeout_ms;
	t->memory = memory;
	t->pids = pids;
	t->output = output;
	if ((exec && add_paths(t->exec, &t->n_exec, exec, err, sizeof(err), "exec")) ||
	    (ro && add_paths(t->ro, &t->n_ro, ro, err, sizeof(err), "ro"))) {
		tool_free(t);
		return -ENOMEM;
	}
	p->tools[p->n_tools++] = t;
	return 0;
}

static int add_builtins(struct kvs_policy *p)
{
	int rc = 0;

	/* a shell and the commands of /usr/bin; nothing else of the host */
	rc |= add_builtin(p, "sh", "/bin/sh /usr/bin", "/usr/share/zoneinfo", 0,
			  30000, 256ull << 20, 64, 1u << 20);
	/* gcc's driver, compilers, assembler, linker and headers; the
	 * program it builds runs from the work directory */
	rc |= add_builtin(p, "c_compile_run", "/usr/bin /usr/lib/gcc /usr/libexec",
			  "/usr/include /usr/lib", 1, 30000, 512ull << 20, 64, 1u << 20);
	/* kvarenad's calc: the shell's arithmetic, nothing else */
	rc |= add_builtin(p, "calc", "/bin/sh", NULL, 0, 5000, 64ull << 20, 4, 4096);
	rc |= add_builtin(p, "read_file", NULL, NULL, 0, 1000, 4u << 20, 1, 1u << 20);
	rc |= add_builtin(p, "write_file", NULL, NULL, 0, 1000, 4u << 20, 1, 1u << 20);
	rc |= add_builtin(p, "list_dir", NULL, NULL, 0, 1000, 4u << 20, 1, 1u << 20);
	return rc ? -ENOMEM : 0;
}

/* ---- compiling a tool ----------------------------------------------- */

struct compiler {
	struct kvs_tool *t;
	char *err;
	size_t errlen;
	int skel_cap;
};

static int is_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (n == 1)
		return 1;
	return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == 0);
}

static int skel_add(struct compiler *c, enum kvs_node kind, const char *abs, const char *target)
{
	struct kvs_tool *t = c->t;
	struct kvs_skel *s;
	int i;

	for (i = 0; i < t->n_skel; i++)
		if (!strcmp(t->skel[i].rel, abs + 1))
			return 0;
	if (t->n_skel == c->skel_cap) {
		int cap = c->skel_cap ? c->skel_cap * 2 : 64;

		if (cap > 1024)
			return -E2BIG;
		s = realloc(t->skel, cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		t->skel = s;
		c->skel_cap = cap;
	}
	s = &t->skel[t->n_skel++];
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	snprintf(s->rel, sizeof(s->rel), "%s", abs + 1);
	if (target)
		snprintf(s->target, sizeof(s->target), "%s", target);
	return 0;
}

/* The directories above abs, outermost first, then abs itself. */
static int skel_add_path(struct compiler *c, enum kvs_node kind, const char *abs,
			 const char *target)
{
	char buf[KVS_PATH];
	char *q;
	int rc;

	snprintf(buf, sizeof(buf), "%s", abs);
	for (q = strchr(buf + 1, '/'); q; q = strchr(q + 1, '/')) {
		*q = 0;
		rc = skel_add(c, KVS_NODE_DIR, buf, NULL);
		*q = '/';
		if (rc)
			return rc;
	}
	return skel_add(c, kind, abs, target);
}

static int covered_by_bind(const struct kvs_tool *t, const char *path, int writable)
{
	int i;

	for (i = 0; i < t->n_binds; i++)
		if (t->binds[i].is_dir && t->binds[i].writable == writable &&
		    is_under(path, t->binds[i].src))
			return 1;
	return 0;
}

static int rule_add(struct kvs_tool *t, const char *path, enum kvs_access acc)
{
	int i;

	for (i = 0; i < t->n_rules; i++)
		if (!strcmp(t->rules[i].path, path) && t->rules[i].acc == acc)
			return 0;
	if (t->n_rules >= KVS_MAX_RULES - 8)	/* room for the per-run rules */
		return -E2BIG;
	snprintf(t->rules[t->n_rules].path, KVS_PATH, "%s", path);
	t->rules[t->n_rules++].acc = acc;
	return 0;
}

/* Bind-list entry for a canonical host path, nested binds of the same kind
 * dropped later in finish_binds(). */
static int bind_add(struct compiler *c, const char *canon, int writable, int is_dir, int dev)
{
	struct kvs_tool *t = c->t;
	int i;

	for (i = 0; i < t->n_binds; i++)
		if (!strcmp(t->binds[i].src, canon)) {
			t->binds[i].writable |= writable;
			return 0;
		}
	if (t->n_binds >= KVS_MAX_MOUNTS) {
		snprintf(c->err, c->errlen, "[%s]: more than %d paths to bind", t->name,
			 KVS_MAX_MOUNTS);
		return -E2BIG;
	}
	snprintf(t->binds[t->n_binds].src, KVS_PATH, "%s", canon);
	t->binds[t->n_binds].writable = writable;
	t->binds[t->n_binds].is_dir = is_dir;
	t->binds[t->n_binds].dev = dev;
	t->n_binds++;
	return 0;
}

/* Follow path's symbolic links, recording each one in the skeleton so the
 * name works inside too; bind and rule the canonical file or directory. */
static int add_entry(struct compiler *c, const char *path, enum kvs_access acc,
		     int optional)
{
	char cur[PATH_MAX + KVS_PATH + 2], parent[sizeof(cur)], canonp[PATH_MAX];
	char full[PATH_MAX * 3], link[KVS_PATH];
	struct stat st;
	int hops, rc;

	snprintf(cur, sizeof(cur), "%s", path);
	for (hops = 0; hops < 16; hops++) {
		char *slash;
		const char *name;

		snprintf(parent, sizeof(parent), "%s", cur);
		slash = strrchr(parent, '/');
		name = cur + (slash - parent) + 1;
		if (slash == parent)
			parent[1] = 0;
		else
			*slash = 0;
		if (!realpath(parent, canonp))
			goto missing;
		snprintf(full, sizeof(full), "%s%s%s", canonp, strcmp(canonp, "/") ? "/" : "",
			 name);
		if (!*name)
			snprintf(full, sizeof(full), "%s", canonp);
		if (strlen(full) >= KVS_PATH - 8) {
			snprintf(c->err, c->errlen, "[%s]: %s: path too long", c->t->name, path);
			return -ENAMETOOLONG;
		}
		if (lstat(full, &st))
			goto missing;
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlink(full, link, sizeof(link) - 1);

			if (n <= 0)
				goto missing;
			link[n] = 0;
			if (!covered_by_bind(c->t, full, 0) && !covered_by_bind(c->t, full, 1)) {
				rc = skel_add_path(c, KVS_NODE_LINK, full, link);
				if (rc)
					return rc;
			}
			if (link[0] == '/')
				snprintf(cur, sizeof(cur), "%s", link);
			else
				snprintf(cur, sizeof(cur), "%s/%s", canonp, link);
			continue;
		}
		if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
			snprintf(c->err, c->errlen, "[%s]: %s is not a file or directory",
				 c->t->name, path);
			return -EINVAL;
		}
		if (!strcmp(full, "/") || !strcmp(full, "/etc") || !strcmp(full, "/home") ||
		    is_under(full, "/root") || is_under(full, KVS_WORK)) {
			snprintf(c->err, c->errlen, "[%s]: %s: the host's /, /etc, /home, /root and "
				 "%s are never exposed", c->t->name, path, KVS_WORK);
			return -EPERM;
		}
		rc = bind_add(c, full, acc == KVS_ACC_RW || acc == KVS_ACC_RWX,
			      S_ISDIR(st.st_mode), 0);
		if (!rc)
			rc = rule_add(c->t, full, acc);
		if (rc == -E2BIG && !c->err[0])
			snprintf(c->err, c->errlen, "[%s]: too many paths", c->t->name);
		return rc;
	}
	snprintf(c->err, c->errlen, "[%s]: %s: too many symbolic links", c->t->name, path);
	return -ELOOP;
missing:
	if (optional)
		return 0;
	snprintf(c->err, c->errlen, "[%s]: %s: %s", c->t->name, path, strerror(errno));
	return -ENOENT;
}

static int cmp_bind(const void *a, const void *b)
{
	return strcmp(((const struct kvs_bind *)a)->src, ((const struct kvs_bind *)b)->src);
}

/* Sort parents first; drop binds nested in a bind of the same kind; give
 * each remaining bind its skeleton node. */
static int finish_binds(struct compiler *c)
{
	struct kvs_tool *t = c->t;
	int i, j, n = 0, rc;

	qsort(t->binds, t->n_binds, sizeof(t->binds[0]), cmp_bind);
	for (i = 0; i < t->n_binds; i++) {
		int nested = 0;

		for (j = 0; j < n; j++)
			if (t->binds[j].is_dir && t->binds[j].writable == t->binds[i].writable &&
			    is_under(t->binds[i].src, t->binds[j].src))
				nested = 1;
		if (!nested)
			t->binds[n++] = t->binds[i];
	}
	t->n_binds = n;
	/* links that live inside a bound directory exist there already */
	for (i = 0, n = 0; i < t->n_skel; i++) {
		char abs[KVS_PATH + 1];

		snprintf(abs, sizeof(abs), "/%s", t->skel[i].rel);
		if (t->skel[i].kind == KVS_NODE_LINK &&
		    (covered_by_bind(t, abs, 0) || covered_by_bind(t, abs, 1)))
			continue;
		t->skel[n++] = t->skel[i];
	}
	t->n_skel = n;
	for (i = 0; i < t->n_binds; i++) {
		rc = skel_add_path(c, t->binds[i].is_dir ? KVS_NODE_DIR : KVS_NODE_FILE,
				   t->binds[i].src, NULL);
		if (rc)
			return rc;
	}
	return 0;
}

static int env_add(struct kvs_tool *t, int *n, const char *fmt, const char *a)
{
	char buf[2048];

	snprintf(buf, sizeof(buf), fmt, a);
	t->envp[*n] = strdup(buf);
	if (!t->envp[*n])
		return -ENOMEM;
	(*n)++;
	return 0;
}

int kvs_compile_tool(struct kvs_policy *p, struct kvs_tool *t, char *err, size_t errlen)
{
	struct compiler c = { .t = t, .err = err, .errlen = errlen };
	size_t i;
	int rc = 0, k, n = 0;

	for (i = 0; i < sizeof(merged_usr_links) / sizeof(merged_usr_links[0]); i++) {
		char link[KVS_PATH];
		struct stat st;
		ssize_t len;

		if (lstat(merged_usr_links[i], &st) || !S_ISLNK(st.st_mode))
			continue;
		len = readlink(merged_usr_links[i], link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = 0;
		rc = skel_add(&c, KVS_NODE_LINK, merged_usr_links[i], link);
		if (rc)
			return rc;
	}
	/* fixed mount points */
	rc = skel_add(&c, KVS_NODE_DIR, "/proc", NULL) ?: skel_add(&c, KVS_NODE_DIR, "/dev", NULL) ?:
	     skel_add(&c, KVS_NODE_DIR, "/tmp", NULL) ?: skel_add(&c, KVS_NODE_DIR, "/home", NULL) ?:
	     skel_add(&c, KVS_NODE_DIR, KVS_WORK, NULL) ?:
	     skel_add(&c, KVS_NODE_DIR, "/etc", NULL) ?:
	     skel_add(&c, KVS_NODE_LINK, "/dev/fd", "/proc/self/fd") ?:
	     skel_add(&c, KVS_NODE_LINK, "/dev/stdin", "/proc/self/fd/0") ?:
	     skel_add(&c, KVS_NODE_LINK, "/dev/stdout", "/proc/self/fd/1") ?:
	     skel_add(&c, KVS_NODE_LINK, "/dev/stderr", "/proc/self/fd/2");
	if (rc)
		return rc;
	if (t->system_libs) {
		for (i = 0; i < sizeof(system_lib_dirs) / sizeof(system_lib_dirs[0]); i++) {
			rc = add_entry(&c, system_lib_dirs[i], KVS_ACC_RO, 1);
			if (rc)
				return rc;
		}
		if (p->ld_so[0]) {
			rc = add_entry(&c, p->ld_so, KVS_ACC_EXEC, 0);
			if (rc)
				return rc;
		}
	}
	/* a built-in's paths are the usual Debian ones; a host without one
	 * simply does not get it */
	for (k = 0; k < t->n_ro; k++)
		if ((rc = add_entry(&c, t->ro[k], KVS_ACC_RO, t->builtin)))
			return rc;
	for (k = 0; k < t->n_exec; k++)
		if ((rc = add_entry(&c, t->exec[k], KVS_ACC_EXEC, t->builtin)))
			return rc;
	for (k = 0; k < t->n_rw; k++)
		if ((rc = add_entry(&c, t->rw[k], KVS_ACC_RW, t->builtin)))
			return rc;
	for (i = 0; i < sizeof(dev_nodes) / sizeof(dev_nodes[0]); i++) {
		struct stat st;

		if (stat(dev_nodes[i], &st) || !S_ISCHR(st.st_mode))
			continue;
		rc = bind_add(&c, dev_nodes[i], 1, 0, 1);
		if (!rc)
			rc = rule_add(t, dev_nodes[i], KVS_ACC_DEV);
		if (rc)
			return rc;
	}
	rc = rule_add(t, "/proc", KVS_ACC_RO);
	if (!rc && t->tmp_bytes)
		rc = rule_add(t, "/tmp", KVS_ACC_RW);
	if (rc)
		return rc;
	rc = finish_binds(&c);
	if (rc) {
		if (!err[0])
			snprintf(err, errlen, "[%s]: root too large", t->name);
		return rc;
	}
	for (k = 0; t->envp[k]; k++)
		free(t->envp[k]);
	memset(t->envp, 0, sizeof(t->envp));
	rc = env_add(t, &n, "PATH=%s", t->path) ?: env_add(t, &n, "HOME=%s", KVS_WORK) ?:
	     env_add(t, &n, "TMPDIR=%s", t->tmp_bytes ? "/tmp" : KVS_WORK) ?:
	     env_add(t, &n, "LANG=%s", "C.UTF-8") ?: env_add(t, &n, "USER=%s", "tool");
	for (k = 0; !rc && k < t->n_env; k++)
		rc = env_add(t, &n, "%s", t->env[k]);
	return rc;
}

int kvs_exec_allowed(const struct kvs_tool *t, const char *host_path)
{
	int i;

	for (i = 0; i < t->n_rules; i++)
		if (t->rules[i].acc == KVS_ACC_EXEC && is_under(host_path, t->rules[i].path))
			return 1;
	return 0;
}

const struct kvs_tool *kvs_find_tool(const struct kvs_policy *p, const char *name)
{
	int i;

	if (!name)
		return NULL;
	for (i = 0; i < p->n_tools; i++)
		if (!strcmp(p->tools[i]->name, name))
			return p->tools[i];
	return NULL;
}

int kvs_policy_has_tool(const struct kvs_policy *p, const char *tool)
{
	return kvs_find_tool(p, tool) != NULL;
}

pid_t kvs_policy_spawner_pid(const struct kvs_policy *p)
{
	return p->spawner_fd >= 0 ? p->spawner_pid : 0;
}

uint64_t kvs_policy_workdir_size(const struct kvs_policy *p)
{
	return p->privileged && p->spawner_fd >= 0 ? p->workdir_size : 0;
}

const char *kvs_policy_host_notes(const struct kvs_policy *p)
{
	return p->notes;
}

void kvs_policy_free(struct kvs_policy *p)
{
	int i;

	if (!p)
		return;
	for (i = 0; i < p->n_tools; i++)
		tool_free(p->tools[i]);
	kvs_spawner_stop(p);
	free(p->bpf[0].f);
	free(p->bpf[1].f);
	free(p->uid_slots);
	if (p->mntns_fd >= 0)
		close(p->mntns_fd);
	free(p);
}

static struct kvs_policy *policy_new(void)
{
	struct kvs_policy *p = calloc(1, sizeof(*p));
	size_t i;

	if (!p)
		return NULL;
	p->uid = 65534;
	p->gid = 65534;
	p->uid_base = KVS_UID_BASE;
	p->uid_count = KVS_UID_COUNT;
	p->workdir_size = KVS_WORKDIR_SIZE;
	p->workdir_inodes = 16384;
	p->mntns_fd = -1;
	p->spawner_fd = -1;
	for (i = 0; i < sizeof(ld_so_candidates) / sizeof(ld_so_candidates[0]); i++)
		if (realpath(ld_so_candidates[i], p->ld_so))
			break;
	if (i == sizeof(ld_so_candidates) / sizeof(ld_so_candidates[0]))
		p->ld_so[0] = 0;
	if (add_builtins(p)) {
		kvs_policy_free(p);
		return NULL;
	}
	return p;
}

/* Everything the host decides, once: compile every tool, the seccomp
 * program, cgroup and Landlock support. */
static int policy_seal(struct kvs_policy *p, char *err, size_t errlen)
{
	int i, rc;

	FILE *f;

	p->cap_last = 63;	/* PR_CAPBSET_DROP of an unknown cap: EINVAL, skipped */
	f = fopen("/proc/sys/kernel/cap_last_cap", "re");
	if (f) {
		if (fscanf(f, "%u", &p->cap_last) != 1 || p->cap_last > 63)
			p->cap_last = 63;
		fclose(f);
	}
	p->privileged = geteuid() == 0;
	if (!p->privileged) {
		/* the tool runs as the launcher's user: one uid, plain dirs */
		p->uid = geteuid();
		p->gid = getegid();
		p->uid_count = 0;
		if (p->workdir_size)
			kvs_note(p->notes, sizeof(p->notes), "unprivileged launcher: work "
				 "directories are plain directories, their size not capped "
				 "(RLIMIT_FSIZE per file only), every tool runs as uid %u",
				 (unsigned int)p->uid);
		if (getgroups(0, NULL) > 0)
			kvs_note(p->notes, sizeof(p->notes), "unprivileged launcher: its "
				 "supplementary groups stay with its tools (only a root launcher "
				 "can drop them): start it without any");
	} else if (p->uid_count) {
		if ((p->uid >= p->uid_base && p->uid - p->uid_base < p->uid_count) ||
		    (p->gid >= p->uid_base && p->gid - p->uid_base < p->uid_count)) {
			snprintf(err, errlen, "uid_range %u %u holds the policy's uid/gid",
				 (unsigned int)p->uid_base, p->uid_count);
			return -EINVAL;
		}
		p->uid_slots = calloc((p->uid_count + 7) / 8, 1);
		if (!p->uid_slots)
			return -ENOMEM;
	}
	for (i = 0; i < p->n_tools; i++) {
		rc = kvs_compile_tool(p, p->tools[i], err, errlen);
		if (rc) {
			if (!err[0])
				snprintf(err, errlen, "[%s]: %s", p->tools[i]->name, strerror(-rc));
			return rc;
		}
	}
	/* the filters depend on what the host's cgroups and kernel enforce */
	kvs_cgroup_setup(p);
	/* vm.memfd_noexec is per PID namespace, but only real root may
	 * write it: an unprivileged launcher's runs get memfd_create denied */
	p->have_memfd_noexec = access("/proc/sys/vm/memfd_noexec", F_OK) == 0;
	if (!p->have_memfd_noexec)
		kvs_note(p->notes, sizeof(p->notes), "no vm.memfd_noexec (kernel < 6.3): "
			 "memfd_create denied (code in a memfd would run from no path)");
	else if (!p->privileged)
		kvs_note(p->notes, sizeof(p->notes), "unprivileged launcher: memfd_create denied "
			 "(vm.memfd_noexec needs root to set)");
	p->have_memfd_noexec &= p->privileged;
	if (!p->cgroup_ok || !p->have_memory) {
		if (p->without_memcg == KVS_NOMEM_REFUSE) {
			kvs_note(p->notes, sizeof(p->notes), "no memory controller: every run is "
				 "refused (without_memory_controller = refuse)");
		} else {
			p->restrict_memory = 1;
			kvs_note(p->notes, sizeof(p->notes), "no memory controller: memfd_create, "
				 "memfd_secret, shmget and msgget denied, RLIMIT_NOFILE at most %d "
				 "unless a tool sets nofile (without_memory_controller = restrict)",
				 KVS_NOMEM_NOFILE);
			for (i = 0; i < p->n_tools; i++)
				if (p->tools[i]->nofile_set && p->tools[i]->nofile > KVS_NOMEM_NOFILE)
					kvs_note(p->notes, sizeof(p->notes), "[%s] keeps nofile = %u",
						 p->tools[i]->name, p->tools[i]->nofile);
		}
	}
	rc = kvs_seccomp_build(p, err, errlen);
	if (rc)
		return rc;
	p->landlock_abi = kvs_landlock_abi();
	if (p->landlock_abi <= 0)
		kvs_note(p->notes, sizeof(p->notes),
			 "Landlock unavailable (kernel lacks it or it is not in lsm=): file and "
			 "exec rules rest on the mount namespace alone");
	if (p->privileged) {
		/* a root launcher's runs build their roots in copies of it */
		rc = kvs_mntns_create();
		if (rc < 0) {
			snprintf(err, errlen, "creating the template mount namespace: %s",
				 strerror(-rc));
			return rc;
		}
		p->mntns_fd = rc;
	}
	return 0;
}

int kvs_policy_load(const char *path, struct kvs_policy **out, char *err, size_t errlen)
{
	struct parse_state *st;
	struct stat sb;
	FILE *f;
	int line, rc;

	*out = NULL;
	if (errlen)
		err[0] = 0;
	f = fopen(path, "re");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode) || sb.st_size > POLICY_FILE_MAX) {
		snprintf(err, errlen, "%s: not a regular file of at most %u bytes", path,
			 POLICY_FILE_MAX);
		fclose(f);
		return -EINVAL;
	}
	st = calloc(1, sizeof(*st));
	if (!st) {
		fclose(f);
		return -ENOMEM;
	}
	st->p = policy_new();
	if (!st->p) {
		fclose(f);
		free(st);
		return -ENOMEM;
	}
	line = ini_parse_file(f, policy_ini_line, st);
	fclose(f);
	if (line || st->err[0]) {
		if (line > 0)
			snprintf(err, errlen, "%s:%d: %s", path, line,
				 st->err[0] ? st->err : "syntax error (lines are at most 200 bytes)");
		else if (line < 0)
			snprintf(err, errlen, "%s: cannot parse (out of memory)", path);
		else
			snprintf(err, errlen, "%s: %s", path, st->err);
		kvs_policy_free(st->p);
		free(st);
		return -EINVAL;
	}
	rc = policy_seal(st->p, err, errlen);
	if (rc) {
		char tmp[512];

		snprintf(tmp, sizeof(tmp), "%s: %s", path, err);
		snprintf(err, errlen, "%s", tmp);
		kvs_policy_free(st->p);
		free(st);
		return rc;
	}
	*out = st->p;
	free(st);
	return 0;
}

int kvs_policy_default(const char *const *extra_exec, struct kvs_policy **out,
		       char *err, size_t errlen)
{
	struct kvs_policy *p;
	struct kvs_tool *t;
	int rc, i;

	*out = NULL;
	if (errlen)
		err[0] = 0;
	p = policy_new();
	if (!p)
		return -ENOMEM;
	t = calloc(1, sizeof(*t));
	if (!t) {
		kvs_policy_free(p);
		return -ENOMEM;
	}
	tool_defaults(t, "default");
	p->tools[p->n_tools++] = t;
	for (i = 0; extra_exec && extra_exec[i]; i++) {
		if (extra_exec[i][0] != '/' || strlen(extra_exec[i]) >= KVS_PATH - 8) {
			snprintf(err, errlen, "%s: want an absolute path", extra_exec[i]);
			kvs_policy_free(p);
			return -EINVAL;
		}
		rc = list_add(t->exec, &t->n_exec, extra_exec[i], err, errlen, "exec");
		if (rc) {
			kvs_policy_free(p);
			return rc;
		}
	}
	rc = policy_seal(p, err, errlen);
	if (rc) {
		kvs_policy_free(p);
		return rc;
	}
	*out = p;
	return 0;
}
