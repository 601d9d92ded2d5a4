// SPDX-License-Identifier: MIT
/*
 * workdir.c - work directories: making one, the ids a run in it gets, and
 * removing one, however deep, without following a link out of it.
 *
 * A root launcher's spawner (kvs_policy_start_spawner()) runs in a mount
 * namespace of its own, and there each work directory it makes is a tmpfs
 * of its own: capped in bytes (workdir_size, or less per directory) and
 * inodes, nosuid, nodev and noexec on the host side, owned by a uid of the
 * policy's uid_range that no other work directory has while it exists
 * (the runs in it map to that uid: sessions share no uid with each other
 * or with the host's nobody, nor per-user limits like pipe buffers), and
 * its root is the filesystem's, so a run's mountinfo names no host path.
 * The mounts live and die with the spawner; nothing of them is in the
 * host's mount table. Elsewhere (no spawner, an unprivileged launcher) a
 * work directory is a plain directory, 0700, and the note says that its
 * size is not capped.
 *
 * Either way the directory sits in its parent, which the operator keeps
 * 0700 and root's (kvarenad's workdir_root): what a tool does to its own
 * directory (chmod 0777, a setuid file, which seccomp refuses anyway)
 * reaches no other user of the host.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "sandbox_internal.h"

#ifndef UMOUNT_NOFOLLOW
#define UMOUNT_NOFOLLOW 0x00000008
#endif

/* making a directory and mounting it is one step for concurrent runs of
 * one session (a round's calls) */
static pthread_mutex_t wd_lock = PTHREAD_MUTEX_INITIALIZER;

static int slot_take(struct kvs_policy *p, uid_t *uid)
{
	uint32_t i;

	for (i = 0; i < p->uid_count; i++)
		if (!(p->uid_slots[i / 8] & (1u << (i % 8)))) {
			p->uid_slots[i / 8] |= (uint8_t)(1u << (i % 8));
			*uid = p->uid_base + i;
			return 0;
		}
	return -EUSERS;
}

static void slot_give(struct kvs_policy *p, uid_t uid)
{
	uint32_t i = uid - p->uid_base;

	if (p->uid_slots && uid >= p->uid_base && i < p->uid_count)
		p->uid_slots[i / 8] &= (uint8_t)~(1u << (i % 8));
}

/* 1 when path is the root of a tmpfs mount (one of ours). */
static int is_session_mount(const char *path)
{
	struct statfs sf;
	struct stat a, b;
	char up[PATH_MAX + 4];

	if (statfs(path, &sf) || sf.f_type != TMPFS_MAGIC || stat(path, &a))
		return 0;
	snprintf(up, sizeof(up), "%s/..", path);
	return stat(up, &b) == 0 && a.st_dev != b.st_dev;
}

/* The ids a run in canon maps its uid 1000 to. */
void kvs_wd_ids(const struct kvs_policy *p, const char *canon, uid_t *uid, gid_t *gid)
{
	struct stat st;

	*uid = p->uid;
	*gid = p->gid;
	if (p->uid_count && stat(canon, &st) == 0 && st.st_uid >= p->uid_base &&
	    st.st_uid - p->uid_base < p->uid_count) {
		*uid = st.st_uid;
		*gid = (gid_t)st.st_uid;
	}
}

/* A new directory at want (made by mkdir just now): with private mounts,
 * a tmpfs of size bytes over it, owned by a uid of its own. */
static int wd_mount(struct kvs_policy *p, const char *want, uint64_t size, char *note,
		    size_t notelen)
{
	char opts[160];
	uid_t uid = p->uid;
	int rc;

	if (p->uid_count) {
		rc = slot_take(p, &uid);
		if (rc) {
			kvs_note(note, notelen, "work directory %s: every uid of uid_range is taken "
				 "(%u work directories)", want, p->uid_count);
			return rc;
		}
	}
	snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%u,mode=0700,uid=%u,gid=%u",
		 (unsigned long long)size, p->workdir_inodes, (unsigned int)uid,
		 (unsigned int)uid);
	if (mount("tmpfs", want, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts)) {
		rc = -errno;
		kvs_note(note, notelen, "work directory %s: mounting its tmpfs: %s", want,
			 strerror(errno));
		slot_give(p, uid);
		return rc;
	}
	return 0;
}

int kvs_wd_prepare(const struct kvs_policy *cp, const char *want, uint64_t size, char *canon,
		   int *temp, char *note, size_t notelen)
{
	struct kvs_policy *p = (struct kvs_policy *)cp;	/* the slots: under wd_lock */
	char tmpl[] = "/tmp/kvs-work-XXXXXX";
	int made = 0, rc = 0, mounts = p->private_mounts && p->workdir_size;
	struct stat st;

	*temp = 0;
	if (!size || size > p->workdir_size)
		size = p->workdir_size;
	if (want && want[0] != '/') {
		kvs_note(note, notelen, "work directory '%s': want an absolute path", want);
		return -EINVAL;
	}
	pthread_mutex_lock(&wd_lock);
	if (!want) {
		if (!mkdtemp(tmpl)) {
			rc = -errno;
			goto out;
		}
		want = tmpl;
		made = *temp = 1;
	} else if (mkdir(want, 0700) == 0) {
		made = 1;
	} else if (errno != EEXIST) {
		rc = -errno;
		kvs_note(note, notelen, "work directory %s: %s", want, strerror(errno));
		goto out;
	}
	if (!realpath(want, canon) || stat(canon, &st) || !S_ISDIR(st.st_mode)) {
		kvs_note(note, notelen, "work directory %s: not a directory", want);
		rc = -ENOTDIR;
		goto out;
	}
	if (!strcmp(canon, "/")) {
		kvs_note(note, notelen, "the host's root cannot be a work directory");
		rc = -EPERM;
		goto out;
	}
	if (made && mounts) {
		rc = wd_mount(p, canon, size, note, notelen);
	} else if (made && p->privileged && chown(canon, p->uid, p->gid)) {
		rc = -errno;
	} else if (!made && p->privileged && !is_session_mount(canon) && st.st_uid != p->uid) {
		kvs_note(note, notelen, "work directory %s is owned by uid %u, the tool runs as "
			 "uid %u outside", canon, (unsigned int)st.st_uid, (unsigned int)p->uid);
	}
	if (rc && made)
		rmdir(canon);
out:
	pthread_mutex_unlock(&wd_lock);
	return rc;
}

/* Empty the directory dfd, however deep: a subdirectory that is not empty
 * has its entries moved up into dfd (renameat2, RENAME_NOREPLACE, under
 * fresh names) and is removed, and the loop goes on until dfd is empty.
 * Two descriptors at any time, no recursion, never a ".." or a link
 * followed: a tree of any depth goes, and nothing outside it. */
static void empty_dir(int dfd)
{
	unsigned long seq = 0;
	int pass;

	for (pass = 0; pass < 1000000; pass++) {
		int any = 0, progress = 0, dup_fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
		DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
		struct dirent *de;

		if (!d) {
			if (dup_fd >= 0)
				close(dup_fd);
			return;
		}
		rewinddir(d);
		while ((de = readdir(d))) {
			int sub, tries;
			DIR *sd;
			struct dirent *se;

			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			any = 1;
			if (unlinkat(dfd, de->d_name, 0) == 0 ||
			    unlinkat(dfd, de->d_name, AT_REMOVEDIR) == 0) {
				progress = 1;
				continue;
			}
			if (errno != ENOTEMPTY && errno != EEXIST)
				continue;
			sub = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 && errno == EACCES && !fchmodat(dfd, de->d_name, 0700, 0))
				sub = openat(dfd, de->d_name,
					     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			sd = sub >= 0 ? fdopendir(sub) : NULL;
			if (!sd) {
				if (sub >= 0)
					close(sub);
				continue;
			}
			while ((se = readdir(sd))) {
				char name[40];

				if (!strcmp(se->d_name, ".") || !strcmp(se->d_name, ".."))
					continue;
				for (tries = 0; tries < 8; tries++) {
					snprintf(name, sizeof(name), ".kvs-rm-%lu", seq++);
					if (renameat2(sub, se->d_name, dfd, name, RENAME_NOREPLACE) == 0) {
						progress = 1;
						break;
					}
					if (errno != EEXIST)
						break;
				}
			}
			closedir(sd);
			if (unlinkat(dfd, de->d_name, AT_REMOVEDIR) == 0)
				progress = 1;
		}
		closedir(d);
		if (!any || !progress)
			return;
	}
}

void kvs_remove_tree(const char *path)
{
	int fd;

	if (!path || path[0] != '/' || !strcmp(path, "/"))
		return;
	/* a session's tmpfs: its contents go with the mount */
	umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW);
	if (unlink(path) == 0 || errno == ENOENT)
		return;
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	empty_dir(fd);
	close(fd);
	rmdir(path);
}

void kvs_wd_remove(const struct kvs_policy *cp, const char *path)
{
	struct kvs_policy *p = (struct kvs_policy *)cp;
	struct stat st;
	uid_t uid = 0;
	int ours = 0;

	if (!path || path[0] != '/')
		return;
	pthread_mutex_lock(&wd_lock);
	if (p->uid_count && is_session_mount(path) && stat(path, &st) == 0) {
		ours = 1;
		uid = st.st_uid;
	}
	kvs_remove_tree(path);
	if (ours && !is_session_mount(path))
		slot_give(p, uid);	/* unmounted: nothing of it is left */
	pthread_mutex_unlock(&wd_lock);
}
