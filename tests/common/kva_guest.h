/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared by the programs that run inside test guests (the CUnit
 * suite, kva-fuzz, kva-failnth): the module's sysfs counters and vgem's
 * DRM card.  Header-only, so each program stays one compile.
 */
#ifndef KVA_GUEST_H
#define KVA_GUEST_H

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A /sys/class/misc/kvarena counter, -1 if unreadable. */
static inline long long kvg_sysfs_num(const char *name)
{
	char path[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/misc/kvarena/%s", name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%lld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/*
 * Wait up to tries x step_us for every resource counter to reach zero:
 * closes and kills release through deferred fput and io_uring exit work.
 * On failure, why (if given) names the counters left.
 */
static inline bool kvg_counters_zero(int tries, unsigned int step_us,
				     char *why, size_t len)
{
	static const char *const names[] = { "arenas", "pinned_bytes", "sessions",
					     "blocks_used" };
	int i, t;

	for (t = 0; t < tries; t++) {
		bool zero = true;

		for (i = 0; i < 4; i++)
			zero &= kvg_sysfs_num(names[i]) == 0;
		if (zero)
			return true;
		usleep(step_us);
	}
	if (why)
		snprintf(why, len, "arenas=%lld pinned_bytes=%lld sessions=%lld blocks_used=%lld",
			 kvg_sysfs_num("arenas"), kvg_sysfs_num("pinned_bytes"),
			 kvg_sysfs_num("sessions"), kvg_sysfs_num("blocks_used"));
	return false;
}

/* vgem's DRM card (a bare platform device), opened; -1 if none. */
static inline int kvg_open_vgem(void)
{
	char path[PATH_MAX], real[PATH_MAX];
	struct dirent *e;
	int fd = -1;
	DIR *d = opendir("/sys/class/drm");

	if (!d)
		return -1;
	while ((e = readdir(d)) && fd < 0) {
		if (strncmp(e->d_name, "card", 4) || strchr(e->d_name, '-'))
			continue;
		snprintf(path, sizeof(path), "/sys/class/drm/%s", e->d_name);
		if (!realpath(path, real) || !strstr(real, "/platform/vgem/"))
			continue;
		snprintf(path, sizeof(path), "/dev/dri/%s", e->d_name);
		fd = open(path, O_RDWR | O_CLOEXEC);
	}
	closedir(d);
	return fd;
}

#endif
