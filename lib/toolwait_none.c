// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The tool-wait API in a library built without it (make KVA_TOOLWAIT=0: no
 * clang, bpftool or libbpf needed).  Same symbols, so that programs link
 * either way; loading says -EOPNOTSUPP, and without a loaded handle nothing
 * else can be reached.  Prediction needs no BPF and stays real.
 */
#include <errno.h>
#include <stddef.h>
#include <sys/stat.h>

#include "internal.h"
#include "kvarena_toolwait.h"
#include "kvc_predict.h"

KVA_EXPORT int kva_toolwait_open(const struct kva_toolwait_opts *opts,
				 struct kva_toolwait **twp)
{
	struct kva_toolwait_opts o;
	int ret;

	if (!twp)
		return -EINVAL;
	*twp = NULL;
	if (opts) {	/* the same answers to bad options as the real one */
		ret = kva_abi_in(&o, sizeof(o), opts, opts->size,
				 KVA_TOOLWAIT_OPTS_SIZE_VER0);
		if (ret)
			return ret;
	}
	kva_log(KVA_LOG_ERR, "toolwait: libkvarena was built without it "
		"(KVA_TOOLWAIT=0)");
	return -EOPNOTSUPP;
}

KVA_EXPORT int kva_toolwait_open_pinned(const char *pin_dir,
					struct kva_toolwait **twp)
{
	(void)pin_dir;
	if (!twp)
		return -EINVAL;
	return kva_toolwait_open(NULL, twp);
}

/* No handle can exist: these are never reached with a valid one. */
KVA_EXPORT void kva_toolwait_close(struct kva_toolwait *tw) { (void)tw; }
KVA_EXPORT void kva_toolwait_detach(struct kva_toolwait *tw) { (void)tw; }

KVA_EXPORT int kva_toolwait_attach(struct kva_toolwait *tw)
{
	(void)tw;
	return -EOPNOTSUPP;
}

KVA_EXPORT const char *kva_toolwait_describe(const struct kva_toolwait *tw)
{
	(void)tw;
	return "unsupported";
}

KVA_EXPORT int kva_toolwait_session_key(struct kva_arena *arena,
					uint64_t session,
					struct kva_toolwait_key *key)
{
	(void)arena;
	(void)session;
	(void)key;
	return -EOPNOTSUPP;
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

KVA_EXPORT int kva_toolwait_register_cgroup(struct kva_toolwait *tw,
					    uint64_t cgroup_id,
					    const struct kva_toolwait_key *key)
{
	(void)tw;
	(void)cgroup_id;
	(void)key;
	return -EOPNOTSUPP;
}

KVA_EXPORT int kva_toolwait_unregister_cgroup(struct kva_toolwait *tw,
					      uint64_t cgroup_id)
{
	(void)tw;
	(void)cgroup_id;
	return -EOPNOTSUPP;
}

KVA_EXPORT int kva_toolwait_sessions(struct kva_toolwait *tw,
				     struct kva_toolwait_key *keys, int n)
{
	(void)tw;
	(void)keys;
	(void)n;
	return -EOPNOTSUPP;
}

KVA_EXPORT int kva_toolwait_get_session(struct kva_toolwait *tw,
					const struct kva_toolwait_key *key,
					struct kva_toolwait_session *out,
					size_t size)
{
	(void)tw;
	(void)key;
	(void)out;
	(void)size;
	return -EOPNOTSUPP;
}

KVA_EXPORT int kva_toolwait_forget_session(struct kva_toolwait *tw,
					   const struct kva_toolwait_key *key)
{
	(void)tw;
	(void)key;
	return -EOPNOTSUPP;
}

KVA_EXPORT int kva_toolwait_classes(struct kva_toolwait *tw,
				    uint32_t *classes, int n)
{
	(void)tw;
	(void)classes;
	(void)n;
	return -EOPNOTSUPP;
}

KVA_EXPORT int kva_toolwait_class_hist(struct kva_toolwait *tw,
				       uint32_t tool_class,
				       struct kva_toolwait_hist *out,
				       size_t size)
{
	(void)tw;
	(void)tool_class;
	(void)out;
	(void)size;
	return -EOPNOTSUPP;
}

KVA_EXPORT int kva_toolwait_clear_classes(struct kva_toolwait *tw)
{
	(void)tw;
	return -EOPNOTSUPP;
}

KVA_EXPORT int kva_toolwait_get_stats(struct kva_toolwait *tw,
				      struct kva_toolwait_stats *out,
				      size_t size)
{
	(void)tw;
	(void)out;
	(void)size;
	return -EOPNOTSUPP;
}

KVA_EXPORT int kva_toolwait_consume(struct kva_toolwait *tw,
				    kva_toolwait_event_fn fn, void *ctx,
				    int timeout_ms)
{
	(void)tw;
	(void)fn;
	(void)ctx;
	(void)timeout_ms;
	return -EOPNOTSUPP;
}

KVA_EXPORT uint64_t kva_toolwait_predict(const struct kva_toolwait_hist *h,
					 uint64_t elapsed_us, uint64_t hint_us)
{
	return kvc_predict_remaining_us(h->slots, KVA_TOOLWAIT_SLOTS,
					elapsed_us, hint_us);
}
