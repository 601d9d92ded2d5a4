// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The tool-wait loader (kva_toolwait_*): loads bpf/toolwait.bpf.c from
 * its generated skeleton, picks one attach kind per event at load time
 * (module tracepoint: raw_tp, else tracepoint; sched: tp_btf, else raw_tp,
 * else tracepoint; USDT on the memfd backend), pins the maps under
 * /sys/fs/bpf/kvarena/ (mounting bpffs, replacing pins, only when the
 * caller's flags say so), and reads them back.  libbpf prints through the
 * library's logger while the loader calls it.
 * Owns: program lifetime, pins, the ring-buffer consumer.  Does not own:
 * what the programs count (bpf/toolwait.bpf.c) or prediction
 * (kmod/core/kvc_predict.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <linux/types.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "internal.h"
#include "kvarena_toolwait.h"
#include "kvc_predict.h"
#include "toolwait_usdt.h"
#include "toolwait.h"
#include "toolwait.skel.h"

#define KVA_BPF_FS_MAGIC	0xcafe4a11
#define KVA_TRACEFS		"/sys/kernel/tracing"

/* The public records are the maps' records. */
#define TW_SAME(pub, bpf)						\
	_Static_assert(sizeof(struct pub) == sizeof(struct bpf),	\
		       #pub " differs from " #bpf)
TW_SAME(kva_toolwait_key, tw_key);
TW_SAME(kva_toolwait_session, tw_session);
TW_SAME(kva_toolwait_hist, tw_hist);
TW_SAME(kva_toolwait_event, tw_event);
TW_SAME(kva_toolwait_stats, tw_stats);
TW_SAME(kva_usdt_state, tw_usdt_state);
_Static_assert(offsetof(struct kva_usdt_state, block_size) ==
	       offsetof(struct tw_usdt_state, block_size), "usdt record");
_Static_assert(offsetof(struct kva_toolwait_session, slots) ==
	       offsetof(struct tw_session, slots), "tw_session.slots");
_Static_assert(offsetof(struct kva_toolwait_event, source) ==
	       offsetof(struct tw_event, source), "tw_event.source");
_Static_assert(KVA_TOOLWAIT_SLOTS == TW_SLOTS &&
	       KVC_PREDICT_SLOTS == TW_SLOTS, "slot counts");

enum { TW_SESSIONS, TW_CLASSES, TW_CGROUPS, TW_PROCS, TW_STATS, TW_EVENTS,
       TW_NMAPS };
static const char *const tw_map_name[TW_NMAPS] = {
	"sessions", "classes", "cgroups", "procs", "stats", "events",
};

#define TW_MAX_LINKS	8

struct kva_toolwait {
	struct toolwait_bpf *skel;	/* NULL: a view of pinned maps */
	int fd[TW_NMAPS];
	bool own_fds;			/* opened by path: close them */
	struct bpf_link *links[TW_MAX_LINKS];
	int nlinks;
	struct ring_buffer *rb;
	kva_toolwait_event_fn fn;
	void *fn_ctx;
	int consumed;
	enum kva_toolwait_kind module, sched;
	bool usdt;
	int usdt_pid;
	char usdt_path[PATH_MAX];
	char pin_dir[PATH_MAX];		/* "" when not pinned by us */
	char desc[160];
};

static const char *tw_kind_name(enum kva_toolwait_kind k)
{
	switch (k) {
	case KVA_TOOLWAIT_TP_BTF: return "tp_btf";
	case KVA_TOOLWAIT_RAW_TP: return "raw_tp";
	case KVA_TOOLWAIT_TP: return "tracepoint";
	case KVA_TOOLWAIT_OFF: return "off";
	default: return "auto";
	}
}

/* libbpf's messages, to the library's logger (silence without one). */
static int tw_libbpf_print(enum libbpf_print_level level, const char *fmt,
			   va_list ap)
{
	kva_vlog(level == LIBBPF_WARN ? KVA_LOG_WARN :
		 level == LIBBPF_INFO ? KVA_LOG_INFO : KVA_LOG_DEBUG, fmt, ap);
	return 0;
}

/*
 * libbpf's print function is process-wide: ours is installed only around
 * the loader's own libbpf calls, and the previous one put back after.
 */
static libbpf_print_fn_t tw_log_begin(void)
{
	return libbpf_set_print(tw_libbpf_print);
}

static void tw_log_end(libbpf_print_fn_t old)
{
	libbpf_set_print(old);
}

static int tw_mount_if_absent(const char *dir, const char *type,
			      unsigned long magic, bool may_mount)
{
	struct statfs fs;

	if (statfs(dir, &fs) == 0 && (unsigned long)fs.f_type == magic)
		return 0;
	if (!may_mount) {
		kva_log(KVA_LOG_ERR, "toolwait: %s is not mounted on %s "
			"(KVA_TOOLWAIT_MOUNT mounts it)", type, dir);
		return -ENODEV;
	}
	mkdir(dir, 0755);
	if (mount(type, dir, type, 0, magic == KVA_BPF_FS_MAGIC ?
		  "mode=0700" : NULL))
		return -errno;
	return 0;
}

static int tw_need_tracefs(bool may_mount)
{
	if (access(KVA_TRACEFS "/events", F_OK) == 0 ||
	    access("/sys/kernel/debug/tracing/events", F_OK) == 0)
		return 0;
	return tw_mount_if_absent(KVA_TRACEFS, "tracefs", 0x74726163,
				  may_mount);
}

/* The file (library or executable) holding the memfd backend's probe. */
static int tw_self_path(char *buf, size_t len)
{
	uintptr_t addr = (uintptr_t)&kva_memfd_call;
	char line[PATH_MAX + 128];
	int ret = -ENOENT;
	FILE *f;

	f = fopen("/proc/self/maps", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		int pos = 0;
		char *path;

		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi,
			   &pos) < 2 || !pos || addr < lo || addr >= hi)
			continue;
		path = line + pos;
		path[strcspn(path, "\n")] = 0;
		if (path[0] == '/' && strlen(path) < len) {
			strcpy(buf, path);
			ret = 0;
		}
		break;
	}
	fclose(f);
	return ret;
}

static enum kva_toolwait_kind tw_pick_sched(enum kva_toolwait_kind want)
{
	if (want != KVA_TOOLWAIT_AUTO)
		return want;
	if (libbpf_find_vmlinux_btf_id("sched_process_fork",
				       BPF_TRACE_RAW_TP) > 0)
		return KVA_TOOLWAIT_TP_BTF;
	return KVA_TOOLWAIT_RAW_TP;
}

static enum kva_toolwait_kind tw_pick_module(enum kva_toolwait_kind want)
{
	if (want != KVA_TOOLWAIT_AUTO)
		return want == KVA_TOOLWAIT_TP_BTF ? KVA_TOOLWAIT_RAW_TP : want;
	return access("/sys/module/kvarena", F_OK) == 0 ?
	       KVA_TOOLWAIT_RAW_TP : KVA_TOOLWAIT_OFF;
}

/* Keep exactly the programs of the chosen kinds. */
static void tw_select(struct kva_toolwait *tw)
{
	struct toolwait_bpf *s = tw->skel;
	enum kva_toolwait_kind k = tw->sched;

	bpf_program__set_autoload(s->progs.raw_tp_session_state,
				  tw->module == KVA_TOOLWAIT_RAW_TP);
	bpf_program__set_autoload(s->progs.tp_session_state,
				  tw->module == KVA_TOOLWAIT_TP);
	bpf_program__set_autoload(s->progs.usdt_session_state, tw->usdt);
	bpf_program__set_autoload(s->progs.btf_fork, k == KVA_TOOLWAIT_TP_BTF);
	bpf_program__set_autoload(s->progs.btf_exec, k == KVA_TOOLWAIT_TP_BTF);
	bpf_program__set_autoload(s->progs.btf_exit, k == KVA_TOOLWAIT_TP_BTF);
	bpf_program__set_autoload(s->progs.raw_fork, k == KVA_TOOLWAIT_RAW_TP);
	bpf_program__set_autoload(s->progs.raw_exec, k == KVA_TOOLWAIT_RAW_TP);
	bpf_program__set_autoload(s->progs.raw_exit, k == KVA_TOOLWAIT_RAW_TP);
	bpf_program__set_autoload(s->progs.tp_fork, k == KVA_TOOLWAIT_TP);
	bpf_program__set_autoload(s->progs.tp_exec, k == KVA_TOOLWAIT_TP);
	bpf_program__set_autoload(s->progs.tp_exit, k == KVA_TOOLWAIT_TP);
}

static struct bpf_map *tw_map(struct kva_toolwait *tw, int i)
{
	struct toolwait_bpf *s = tw->skel;
	struct bpf_map *maps[TW_NMAPS] = {
		s->maps.sessions, s->maps.classes, s->maps.cgroups,
		s->maps.procs, s->maps.stats, s->maps.events,
	};

	return maps[i];
}

/* The id of map fd, or of the map pinned at path (fd < 0): 0 and errno
 * set when there is none. */
static __u32 tw_map_id(int fd, const char *path)
{
	struct bpf_map_info mi = { 0 };
	__u32 len = sizeof(mi);
	int f = fd >= 0 ? fd : bpf_obj_get(path), err = 0;

	if (f < 0)
		return 0;
	if (bpf_obj_get_info_by_fd(f, &mi, &len))
		err = errno;
	if (fd < 0)
		close(f);
	errno = err;
	return err ? 0 : mi.id;
}

static void tw_unpin(struct kva_toolwait *tw)
{
	char path[PATH_MAX + 32];
	int i;

	if (!tw->pin_dir[0] || !tw->skel)
		return;
	for (i = 0; i < TW_NMAPS; i++) {
		snprintf(path, sizeof(path), "%s/%s", tw->pin_dir,
			 tw_map_name[i]);
		/* still our map: another loader may have replaced our pins */
		if (tw_map_id(-1, path) == tw_map_id(tw->fd[i], NULL))
			bpf_map__unpin(tw_map(tw, i), path);
	}
	rmdir(tw->pin_dir);
	tw->pin_dir[0] = 0;
}

/*
 * Whether a loaded program uses a map pinned in dir: 1 yes (a live
 * loader's pins), 0 no (a loader that died without unpinning: its
 * programs went with its file descriptors, its pins stayed), negative
 * errno when it cannot tell.  Readers (kva_toolwait_open_pinned) hold
 * map descriptors but no programs, and do not count.
 */
static int tw_pins_live(const char *dir)
{
	__u32 ids[TW_NMAPS], n = 0, id = 0, len, j, k;
	char path[PATH_MAX + 32];
	int i, fd, ret = 0;

	for (i = 0; i < TW_NMAPS; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, tw_map_name[i]);
		ids[n] = tw_map_id(-1, path);
		if (ids[n])
			n++;
		else if (errno != ENOENT)
			return -errno;
	}
	while (bpf_prog_get_next_id(id, &id) == 0) {
		struct bpf_prog_info pi = { 0 };
		__u32 maps[64];

		fd = bpf_prog_get_fd_by_id(id);
		if (fd < 0) {
			if (errno == ENOENT)	/* freed since */
				continue;
			return -errno;
		}
		pi.nr_map_ids = sizeof(maps) / sizeof(maps[0]);
		pi.map_ids = (__u64)(uintptr_t)maps;
		len = sizeof(pi);
		ret = bpf_obj_get_info_by_fd(fd, &pi, &len) ? -errno : 0;
		close(fd);
		if (ret)
			return ret;
		if (pi.nr_map_ids > sizeof(maps) / sizeof(maps[0]))
			pi.nr_map_ids = sizeof(maps) / sizeof(maps[0]);
		for (j = 0; j < pi.nr_map_ids; j++)
			for (k = 0; k < n; k++)
				if (maps[j] == ids[k])
					return 1;
	}
	return errno == ENOENT ? 0 : -errno;
}

/*
 * Pins already there are replaced when the caller said so, or when no
 * loaded program uses their maps (a loader killed before it could unpin:
 * else a daemon restarted after a crash would run without its programs).
 */
static int tw_pin(struct kva_toolwait *tw, const char *dir, uint32_t flags)
{
	char path[PATH_MAX + 32];
	int i, ret, live = 2;	/* 2: not asked */

	if (strlen(dir) >= sizeof(tw->pin_dir))
		return -ENAMETOOLONG;
	if (strncmp(dir, "/sys/fs/bpf", 11) == 0) {
		ret = tw_mount_if_absent("/sys/fs/bpf", "bpf",
					 KVA_BPF_FS_MAGIC,
					 flags & KVA_TOOLWAIT_MOUNT);
		if (ret)
			return ret;
	}
	if (mkdir(dir, 0700) && errno != EEXIST)
		return -errno;
	for (i = 0; i < TW_NMAPS; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, tw_map_name[i]);
		if (access(path, F_OK) || (flags & KVA_TOOLWAIT_REPLACE_PINS))
			continue;
		if (live == 2)
			live = tw_pins_live(dir);
		if (live) {
			kva_log(KVA_LOG_ERR, "toolwait: %s exists: %s "
				"(KVA_TOOLWAIT_REPLACE_PINS replaces it)", path,
				live > 0 ? "a live loader's" : "maybe a live loader's");
			return -EEXIST;
		}
	}
	if (live == 0)
		kva_log(KVA_LOG_INFO, "toolwait: replacing the pins in %s: no "
			"loaded program uses their maps (their loader exited "
			"without unpinning)", dir);
	strcpy(tw->pin_dir, dir);
	for (i = 0; i < TW_NMAPS; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, tw_map_name[i]);
		unlink(path);
		ret = bpf_map__pin(tw_map(tw, i), path);
		if (ret) {
			tw_unpin(tw);
			return ret;
		}
	}
	return 0;
}

static int tw_link(struct kva_toolwait *tw, struct bpf_link *link)
{
	if (!link)
		return -errno ? -errno : -EINVAL;
	if (tw->nlinks >= TW_MAX_LINKS) {
		bpf_link__destroy(link);
		return -E2BIG;
	}
	tw->links[tw->nlinks++] = link;
	return 0;
}

KVA_EXPORT void kva_toolwait_detach(struct kva_toolwait *tw)
{
	while (tw && tw->nlinks > 0)
		bpf_link__destroy(tw->links[--tw->nlinks]);
}

static int tw_attach(struct kva_toolwait *tw);

KVA_EXPORT int kva_toolwait_attach(struct kva_toolwait *tw)
{
	libbpf_print_fn_t old = tw_log_begin();
	int ret = tw_attach(tw);

	tw_log_end(old);
	return ret;
}

static int tw_attach(struct kva_toolwait *tw)
{
	struct toolwait_bpf *s = tw->skel;
	struct bpf_program *sched[3] = { NULL };
	int i, ret = 0;

	if (!s)
		return -EINVAL;
	if (tw->nlinks)
		return 0;
	if (tw->module == KVA_TOOLWAIT_RAW_TP)
		ret = tw_link(tw, bpf_program__attach(s->progs.raw_tp_session_state));
	else if (tw->module == KVA_TOOLWAIT_TP)
		ret = tw_link(tw, bpf_program__attach(s->progs.tp_session_state));
	if (ret)
		goto fail;
	if (tw->sched == KVA_TOOLWAIT_TP_BTF) {
		sched[0] = s->progs.btf_fork;
		sched[1] = s->progs.btf_exec;
		sched[2] = s->progs.btf_exit;
	} else if (tw->sched == KVA_TOOLWAIT_RAW_TP) {
		sched[0] = s->progs.raw_fork;
		sched[1] = s->progs.raw_exec;
		sched[2] = s->progs.raw_exit;
	} else if (tw->sched == KVA_TOOLWAIT_TP) {
		sched[0] = s->progs.tp_fork;
		sched[1] = s->progs.tp_exec;
		sched[2] = s->progs.tp_exit;
	}
	for (i = 0; i < 3 && sched[i]; i++) {
		ret = tw_link(tw, bpf_program__attach(sched[i]));
		if (ret)
			goto fail;
	}
	if (tw->usdt) {
		ret = tw_link(tw, bpf_program__attach_usdt(
				s->progs.usdt_session_state,
				tw->usdt_pid ? tw->usdt_pid : -1,
				tw->usdt_path, "kvarena", "session_state",
				NULL));
		if (ret)
			goto fail;
	}
	return 0;
fail:
	kva_toolwait_detach(tw);
	return ret;
}

static void tw_describe(struct kva_toolwait *tw)
{
	snprintf(tw->desc, sizeof(tw->desc), "module=%s sched=%s usdt=%s",
		 tw_kind_name(tw->module), tw_kind_name(tw->sched),
		 tw->usdt ? "on" : "off");
}

KVA_EXPORT const char *kva_toolwait_describe(const struct kva_toolwait *tw)
{
	return tw->desc;
}

static int tw_open(const struct kva_toolwait_opts *opts,
		   struct kva_toolwait **twp);

KVA_EXPORT int kva_toolwait_open(const struct kva_toolwait_opts *opts,
				 struct kva_toolwait **twp)
{
	libbpf_print_fn_t old = tw_log_begin();
	int ret = tw_open(opts, twp);

	tw_log_end(old);
	return ret;
}

static int tw_open(const struct kva_toolwait_opts *opts,
		   struct kva_toolwait **twp)
{
	struct kva_toolwait_opts o = { 0 };
	struct kva_toolwait *tw;
	int i, ret;

	if (!twp)
		return -EINVAL;
	*twp = NULL;
	if (opts) {
		ret = kva_abi_in(&o, sizeof(o), opts, opts->size,
				 KVA_TOOLWAIT_OPTS_SIZE_VER0);
		if (ret)
			return ret;
	}
	tw = calloc(1, sizeof(*tw));
	if (!tw)
		return -ENOMEM;
	tw->module = tw_pick_module(o.module);
	tw->sched = tw_pick_sched(o.sched);
	tw->usdt = o.usdt != KVA_TOOLWAIT_OFF;
	tw->usdt_pid = o.usdt_pid;
	if (tw->usdt) {
		if (o.usdt_binary) {
			if (strlen(o.usdt_binary) >= sizeof(tw->usdt_path)) {
				ret = -ENAMETOOLONG;
				goto fail;
			}
			strcpy(tw->usdt_path, o.usdt_binary);
		} else {
			ret = tw_self_path(tw->usdt_path,
					   sizeof(tw->usdt_path));
			if (ret)
				goto fail;
		}
	}
	if (o.flags & ~(KVA_TOOLWAIT_MOUNT | KVA_TOOLWAIT_REPLACE_PINS)) {
		ret = -EINVAL;
		goto fail;
	}
	if (tw->module == KVA_TOOLWAIT_TP || tw->sched == KVA_TOOLWAIT_TP) {
		ret = tw_need_tracefs(o.flags & KVA_TOOLWAIT_MOUNT);
		if (ret)
			goto fail;
	}
	tw->skel = toolwait_bpf__open();
	if (!tw->skel) {
		ret = -errno ? -errno : -EINVAL;
		goto fail;
	}
	tw->skel->rodata->targ_arena = o.arena_filter;
	tw->skel->rodata->min_wait_us = o.min_wait_us;
	tw_select(tw);
	ret = toolwait_bpf__load(tw->skel);
	if (ret)
		goto fail;
	for (i = 0; i < TW_NMAPS; i++)
		tw->fd[i] = bpf_map__fd(tw_map(tw, i));
	if (!o.pin_dir || o.pin_dir[0]) {
		ret = tw_pin(tw, o.pin_dir ? o.pin_dir : KVA_TOOLWAIT_PIN_DIR,
			     o.flags);
		if (ret)
			goto fail;
	}
	ret = tw_attach(tw);
	if (ret)
		goto fail;
	tw_describe(tw);
	*twp = tw;
	return 0;
fail:
	kva_toolwait_close(tw);
	return ret;
}

KVA_EXPORT int kva_toolwait_open_pinned(const char *pin_dir,
					struct kva_toolwait **twp)
{
	char path[PATH_MAX + 32];
	struct kva_toolwait *tw;
	int i, ret;

	*twp = NULL;
	tw = calloc(1, sizeof(*tw));
	if (!tw)
		return -ENOMEM;
	tw->own_fds = true;
	for (i = 0; i < TW_NMAPS; i++)
		tw->fd[i] = -1;
	for (i = 0; i < TW_NMAPS; i++) {
		snprintf(path, sizeof(path), "%s/%s",
			 pin_dir ? pin_dir : KVA_TOOLWAIT_PIN_DIR,
			 tw_map_name[i]);
		tw->fd[i] = bpf_obj_get(path);
		if (tw->fd[i] < 0) {
			ret = -errno;
			kva_toolwait_close(tw);
			return ret;
		}
	}
	snprintf(tw->desc, sizeof(tw->desc), "pinned %s",
		 pin_dir ? pin_dir : KVA_TOOLWAIT_PIN_DIR);
	*twp = tw;
	return 0;
}

KVA_EXPORT void kva_toolwait_close(struct kva_toolwait *tw)
{
	int i;

	if (!tw)
		return;
	ring_buffer__free(tw->rb);
	kva_toolwait_detach(tw);
	if (tw->skel) {
		tw_unpin(tw);
		toolwait_bpf__destroy(tw->skel);
	}
	if (tw->own_fds)
		for (i = 0; i < TW_NMAPS; i++)
			if (tw->fd[i] >= 0)
				close(tw->fd[i]);
	free(tw);
}

KVA_EXPORT int kva_toolwait_session_key(struct kva_arena *arena,
					uint64_t session,
					struct kva_toolwait_key *key)
{
	struct kva_arena_info info = { .size = sizeof(info) };
	int ret = kva_arena_get_info(arena, &info);

	if (ret)
		return ret;
	memset(key, 0, sizeof(*key));
	key->arena_id = info.arena_id;
	key->session_id = session;
	if (kva_dev_backend(arena->dev) == KVA_BACKEND_MEMFD)
		key->pid = (uint32_t)getpid();
	return 0;
}

KVA_EXPORT int kva_toolwait_cgroup_id(const char *path, uint64_t *id)
{
	struct stat st;

	if (stat(path, &st))
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	*id = st.st_ino;
	return 0;
}

static int tw_errno(int ret)
{
	return ret < 0 ? -errno : 0;
}

KVA_EXPORT int kva_toolwait_register_cgroup(struct kva_toolwait *tw,
					    uint64_t cgroup_id,
					    const struct kva_toolwait_key *key)
{
	return tw_errno(bpf_map_update_elem(tw->fd[TW_CGROUPS], &cgroup_id,
					    key, BPF_ANY));
}

KVA_EXPORT int kva_toolwait_unregister_cgroup(struct kva_toolwait *tw,
					      uint64_t cgroup_id)
{
	return tw_errno(bpf_map_delete_elem(tw->fd[TW_CGROUPS], &cgroup_id));
}

KVA_EXPORT int kva_toolwait_sessions(struct kva_toolwait *tw,
				     struct kva_toolwait_key *keys, int n)
{
	struct kva_toolwait_key k, next;
	const void *prev = NULL;
	int count = 0;

	while (bpf_map_get_next_key(tw->fd[TW_SESSIONS], prev, &next) == 0) {
		if (count < n)
			keys[count] = next;
		count++;
		k = next;
		prev = &k;
	}
	return count;
}

/* Look a record up into the caller's `size` bytes (the ABI convention). */
static int tw_lookup(int fd, const void *key, void *out, size_t size,
		     void *full, size_t full_size)
{
	int ret = kva_abi_out_check(out, size, full_size);

	if (ret)
		return ret;
	ret = tw_errno(bpf_map_lookup_elem(fd, key, full));
	if (!ret)
		kva_abi_out(out, size, full, full_size);
	return ret;
}

KVA_EXPORT int kva_toolwait_get_session(struct kva_toolwait *tw,
					const struct kva_toolwait_key *key,
					struct kva_toolwait_session *out,
					size_t size)
{
	struct kva_toolwait_session full;

	return tw_lookup(tw->fd[TW_SESSIONS], key, out, size, &full,
			 sizeof(full));
}

KVA_EXPORT int kva_toolwait_forget_session(struct kva_toolwait *tw,
					   const struct kva_toolwait_key *key)
{
	return tw_errno(bpf_map_delete_elem(tw->fd[TW_SESSIONS], key));
}

static int tw_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

KVA_EXPORT int kva_toolwait_classes(struct kva_toolwait *tw,
				    uint32_t *classes, int n)
{
	uint32_t k, next;
	const void *prev = NULL;
	int count = 0;

	while (bpf_map_get_next_key(tw->fd[TW_CLASSES], prev, &next) == 0) {
		if (count < n)
			classes[count] = next;
		count++;
		k = next;
		prev = &k;
	}
	qsort(classes, (size_t)(count < n ? count : n), sizeof(*classes),
	      tw_cmp_u32);
	return count;
}

KVA_EXPORT int kva_toolwait_class_hist(struct kva_toolwait *tw,
				       uint32_t tool_class,
				       struct kva_toolwait_hist *out,
				       size_t size)
{
	struct kva_toolwait_hist full;

	return tw_lookup(tw->fd[TW_CLASSES], &tool_class, out, size, &full,
			 sizeof(full));
}

KVA_EXPORT int kva_toolwait_clear_classes(struct kva_toolwait *tw)
{
	uint32_t keys[TW_MAX_CLASSES];
	int i, n = kva_toolwait_classes(tw, keys, TW_MAX_CLASSES);

	for (i = 0; i < n && i < TW_MAX_CLASSES; i++)
		bpf_map_delete_elem(tw->fd[TW_CLASSES], &keys[i]);
	return 0;
}

KVA_EXPORT int kva_toolwait_get_stats(struct kva_toolwait *tw,
				      struct kva_toolwait_stats *out,
				      size_t size)
{
	struct kva_toolwait_stats full;
	uint32_t zero = 0;

	return tw_lookup(tw->fd[TW_STATS], &zero, out, size, &full,
			 sizeof(full));
}

static int tw_on_sample(void *ctx, void *data, size_t size)
{
	struct kva_toolwait *tw = ctx;
	struct kva_toolwait_event e;

	if (size < sizeof(e))
		return 0;
	memcpy(&e, data, sizeof(e));
	tw->consumed++;
	return tw->fn(&e, tw->fn_ctx) ? -ECANCELED : 0;
}

KVA_EXPORT int kva_toolwait_consume(struct kva_toolwait *tw,
				    kva_toolwait_event_fn fn, void *ctx,
				    int timeout_ms)
{
	libbpf_print_fn_t old;
	int ret;

	if (!tw->rb) {
		old = tw_log_begin();
		tw->rb = ring_buffer__new(tw->fd[TW_EVENTS], tw_on_sample, tw,
					  NULL);
		tw_log_end(old);
		if (!tw->rb)
			return -errno ? -errno : -EINVAL;
	}
	tw->fn = fn;
	tw->fn_ctx = ctx;
	tw->consumed = 0;
	old = tw_log_begin();
	ret = ring_buffer__poll(tw->rb, timeout_ms);
	tw_log_end(old);
	if (ret == -EINTR || ret == -ECANCELED || ret >= 0)
		return tw->consumed;
	return ret;
}

KVA_EXPORT uint64_t kva_toolwait_predict(const struct kva_toolwait_hist *h,
					 uint64_t elapsed_us, uint64_t hint_us)
{
	return kvc_predict_remaining_us(h->slots, KVA_TOOLWAIT_SLOTS,
					elapsed_us, hint_us);
}
