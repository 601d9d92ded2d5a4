// SPDX-License-Identifier: MIT
/*
 * kv_arena.c - the engine's KV pool over a libkvarena arena: block sizing
 * (4 KiB multiples, <= 2 MiB), per-session block tables filled with
 * kva_blocks_alloc / kva_blocks_share and released with kva_session_close,
 * and the hand-over of an arena (geometry + data fd over SCM_RIGHTS) and of
 * session tables to another process. Owns the arena handle or the received
 * mapping; does not own the model or the engines that use the pool.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv_arena.h"

#define KVEA_MAGIC	0x4145564bu	/* "KVEA" */
#define KVEA_POOL	1u
#define KVEA_SESSION	2u
#define KVEA_MAX_IDS	(1u << 22)	/* table entries per session message */

struct kve_arena_kv {
	struct kva_dev *dev;		/* NULL for a view */
	int own_dev;
	struct kva_arena *arena;	/* NULL for a view */
	uint8_t *base;			/* the whole arena, mapped */
	struct kve_kv_pool pool;
	struct kve_arena_geom g;
};

static void set_err(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* The UAPI's block address; NULL for an id outside the arena. */
static void *geom_block_ptr(void *ctx, uint32_t id)
{
	struct kve_arena_kv *kv = ctx;

	if (id >= kv->g.blocks_total)
		return NULL;
	return kv->base + kva_block_offset(kv->g.block_size, id);
}

/* An owned arena: libkvarena's own address computation. */
static void *arena_block_ptr(void *ctx, uint32_t id)
{
	struct kve_arena_kv *kv = ctx;

	return kva_arena_block_ptr(kv->arena, id);
}

static int geom_for_model(const struct kve_model *m, uint32_t *bt,
			  enum kve_kv_dtype dt, struct kve_arena_geom *g,
			  char *err, size_t errlen)
{
	const struct kve_model_info *in = kve_model_info(m);
	size_t per_tok = kve_kv_block_bytes(m, 1, dt);

	if (!per_tok) {
		set_err(err, errlen, "kv_arena: dtype %d invalid%s", (int)dt,
			dt == KVE_KV_Q8_0 ? " (a Q8_0 KV needs a head dimension that is a "
					    "multiple of 32)" : "");
		return -EINVAL;
	}
	if (per_tok > KVA_PAGE_SIZE) {
		set_err(err, errlen,
			"kv_arena: one token's KV is %zu bytes, more than the 2 MiB "
			"a kvarena block can hold", per_tok);
		return -EINVAL;
	}
	if ((uint64_t)per_tok * *bt > KVA_PAGE_SIZE)
		*bt = (uint32_t)(KVA_PAGE_SIZE / per_tok);
	memset(g, 0, sizeof(*g));
	g->block_tokens = *bt;
	g->dtype = (uint32_t)dt;
	g->kv_block_bytes = (uint32_t)(per_tok * *bt);
	g->block_size = (g->kv_block_bytes + 4095u) & ~4095u;
	g->blocks_per_page = (uint32_t)(KVA_PAGE_SIZE / g->block_size);
	g->n_layers = in->n_layers;
	g->n_kv_heads = in->n_kv_heads;
	g->head_dim = in->head_dim;
	return 0;
}

int kve_arena_kv_create(const struct kve_model *m,
			const struct kve_arena_kv_params *p,
			struct kve_arena_kv **kvp, char *err, size_t errlen)
{
	struct kva_arena_params ap = { .size = sizeof(ap) };
	struct kva_arena_info info = { .size = sizeof(info) };
	struct kve_arena_kv *kv;
	uint32_t bt;
	uint64_t pages;
	void *base = NULL;
	int rc;

	if (!m || !p || !kvp) {
		set_err(err, errlen, "kv_arena: model, params and result are required");
		return -EINVAL;
	}
	*kvp = NULL;
	bt = p->block_tokens ? p->block_tokens : KVE_DEFAULT_BLOCK_TOKENS;
	if (bt > 4096 || (p->dtype != KVE_KV_F32 && p->dtype != KVE_KV_F16 &&
			  p->dtype != KVE_KV_Q8_0) || !p->n_blocks) {
		set_err(err, errlen, "kv_arena: block_tokens %u, dtype %d or n_blocks %u invalid",
			bt, (int)p->dtype, p->n_blocks);
		return -EINVAL;
	}
	kv = calloc(1, sizeof(*kv));
	if (!kv) {
		set_err(err, errlen, "kv_arena: out of memory");
		return -ENOMEM;
	}
	rc = geom_for_model(m, &bt, p->dtype, &kv->g, err, errlen);
	if (rc)
		goto fail;
	pages = ((uint64_t)p->n_blocks + kv->g.blocks_per_page - 1) / kv->g.blocks_per_page;
	kv->g.arena_bytes = pages * KVA_PAGE_SIZE;
	if (p->dev) {
		kv->dev = p->dev;
	} else {
		rc = kva_open(p->backend, &kv->dev);
		if (rc) {
			set_err(err, errlen, "kv_arena: kva_open: %s", strerror(-rc));
			goto fail;
		}
		kv->own_dev = 1;
	}
	ap.bytes = kv->g.arena_bytes;
	ap.block_size = kv->g.block_size;
	ap.numa_node = KVA_NUMA_ANY;
	ap.tenant_id = p->tenant_id;
	ap.name = p->name;
	rc = kva_arena_new(kv->dev, &ap, &kv->arena);
	if (rc) {
		int memfd = kva_dev_backend(kv->dev) == KVA_BACKEND_MEMFD;

		kv->arena = NULL;
		set_err(err, errlen, "kv_arena: kva_arena_new(%llu bytes, block %u): %s%s",
			(unsigned long long)ap.bytes, ap.block_size, strerror(-rc),
			memfd && (rc == -ENOMEM || rc == -EAGAIN || rc == -EPERM) ?
			" (the memfd backend mlocks the arena: RLIMIT_MEMLOCK, ulimit -l, "
			"must cover it)" :
			rc == -ENOMEM ? " (kvarena.ko counts the arena against RLIMIT_MEMLOCK, "
			"ulimit -l or LimitMEMLOCK=, unless CAP_IPC_LOCK; or pages ran out)" : "");
		goto fail;
	}
	rc = kva_arena_get_info(kv->arena, &info);
	if (!rc)
		rc = kva_arena_map(kv->arena, &base);
	if (rc) {
		set_err(err, errlen, "kv_arena: arena info/map: %s", strerror(-rc));
		goto fail;
	}
	if (info.block_size != kv->g.block_size ||
	    info.blocks_per_page != kv->g.blocks_per_page || info.bytes != ap.bytes) {
		set_err(err, errlen, "kv_arena: arena geometry differs from the one asked for");
		rc = -EPROTO;
		goto fail;
	}
	kv->g.blocks_total = info.blocks_total;
	kv->base = base;
	kv->pool = (struct kve_kv_pool){ kv, arena_block_ptr, bt, p->dtype };
	*kvp = kv;
	return 0;
fail:
	kve_arena_kv_destroy(kv);
	return rc;
}

int kve_arena_kv_map(const struct kve_model *m, int data_fd,
		     const struct kve_arena_geom *g, struct kve_arena_kv **kvp,
		     char *err, size_t errlen)
{
	struct kve_arena_geom want;
	struct kve_arena_kv *kv;
	struct stat st;
	uint32_t bt;
	void *base = NULL;
	int rc;

	if (!m || !g || !kvp) {
		set_err(err, errlen, "kv_arena: model, geometry and result are required");
		return -EINVAL;
	}
	*kvp = NULL;
	bt = g->block_tokens;
	if (!bt || bt > 4096 || (g->dtype != KVE_KV_F32 && g->dtype != KVE_KV_F16 &&
				 g->dtype != KVE_KV_Q8_0)) {
		set_err(err, errlen, "kv_arena: received block_tokens %u / dtype %u invalid",
			bt, g->dtype);
		return -EINVAL;
	}
	rc = geom_for_model(m, &bt, (enum kve_kv_dtype)g->dtype, &want, err, errlen);
	if (rc)
		return rc;
	if (bt != g->block_tokens || g->n_layers != want.n_layers ||
	    g->n_kv_heads != want.n_kv_heads || g->head_dim != want.head_dim ||
	    g->kv_block_bytes != want.kv_block_bytes) {
		set_err(err, errlen,
			"kv_arena: received KV shape (%u layers, %u kv heads of %u, %u tokens "
			"= %u bytes) does not match the model (%u, %u of %u, %u bytes)",
			g->n_layers, g->n_kv_heads, g->head_dim, g->block_tokens,
			g->kv_block_bytes, want.n_layers, want.n_kv_heads, want.head_dim,
			want.kv_block_bytes);
		return -EINVAL;
	}
	if (g->block_size < g->kv_block_bytes || g->block_size % 4096 ||
	    g->block_size > KVA_PAGE_SIZE ||
	    g->blocks_per_page != KVA_PAGE_SIZE / g->block_size ||
	    !g->arena_bytes || g->arena_bytes % KVA_PAGE_SIZE ||
	    g->arena_bytes > ((uint64_t)1 << 46) ||
	    (uint64_t)g->blocks_total > g->arena_bytes / KVA_PAGE_SIZE * g->blocks_per_page) {
		set_err(err, errlen,
			"kv_arena: received geometry inconsistent (arena %llu bytes, block %u, "
			"%u per page, %u blocks)", (unsigned long long)g->arena_bytes,
			g->block_size, g->blocks_per_page, g->blocks_total);
		return -EINVAL;
	}
	if (fstat(data_fd, &st)) {
		rc = -errno;
		set_err(err, errlen, "kv_arena: data fd: %s", strerror(-rc));
		return rc;
	}
	if (st.st_size && (uint64_t)st.st_size < g->arena_bytes) {
		set_err(err, errlen, "kv_arena: data fd holds %lld bytes, arena says %llu",
			(long long)st.st_size, (unsigned long long)g->arena_bytes);
		return -EINVAL;
	}
	kv = calloc(1, sizeof(*kv));
	if (!kv) {
		set_err(err, errlen, "kv_arena: out of memory");
		return -ENOMEM;
	}
	rc = kva_map_fd(data_fd, (size_t)g->arena_bytes, &base);
	if (rc) {
		free(kv);
		set_err(err, errlen, "kv_arena: kva_map_fd: %s", strerror(-rc));
		return rc;
	}
	kv->g = *g;
	kv->g.reserved = 0;
	kv->base = base;
	kv->pool = (struct kve_kv_pool){ kv, geom_block_ptr, g->block_tokens,
					 (enum kve_kv_dtype)g->dtype };
	*kvp = kv;
	return 0;
}

void kve_arena_kv_destroy(struct kve_arena_kv *kv)
{
	if (!kv)
		return;
	if (kv->arena)
		kva_arena_destroy(kv->arena);	/* unmaps too */
	else if (kv->base)
		kva_unmap(kv->base, (size_t)kv->g.arena_bytes);
	if (kv->own_dev)
		kva_close(kv->dev);
	free(kv);
}

const struct kve_kv_pool *kve_arena_kv_pool(const struct kve_arena_kv *kv)
{
	return &kv->pool;
}

void kve_arena_kv_geom(const struct kve_arena_kv *kv, struct kve_arena_geom *g)
{
	*g = kv->g;
}

struct kva_arena *kve_arena_kv_arena(const struct kve_arena_kv *kv)
{
	return kv->arena;
}

enum kva_backend kve_arena_kv_backend(const struct kve_arena_kv *kv)
{
	return kv->dev ? kva_dev_backend(kv->dev) : KVA_BACKEND_AUTO;
}

/* ---- sessions -------------------------------------------------------- */

int kve_arena_session_open(struct kve_arena_kv *kv, uint64_t cookie,
			   uint32_t max_tokens, struct kve_arena_session *as)
{
	uint32_t bt, cap;
	int rc;

	if (!kv || !as || !max_tokens)
		return -EINVAL;
	memset(as, 0, sizeof(*as));
	if (!kv->arena)
		return -EOPNOTSUPP;
	bt = kv->pool.block_tokens;
	cap = max_tokens / bt + (max_tokens % bt != 0);
	as->s.block_table = calloc(cap, sizeof(uint32_t));
	if (!as->s.block_table)
		return -ENOMEM;
	rc = kva_session_open(kv->arena, cookie, &as->sid);
	if (rc) {
		free(as->s.block_table);
		memset(as, 0, sizeof(*as));
		return rc;
	}
	as->cap = cap;
	return 0;
}

int kve_arena_session_reserve(struct kve_arena_kv *kv,
			      struct kve_arena_session *as, uint32_t n_more)
{
	uint32_t bt, need, have;
	uint64_t need64;
	int rc = 0;

	if (!kv || !as || !as->s.block_table)
		return -EINVAL;
	if (!kv->arena)
		return -EOPNOTSUPP;
	bt = kv->pool.block_tokens;
	need64 = ((uint64_t)as->s.n_tokens + n_more + bt - 1) / bt;
	if (need64 > as->cap)
		return -ENOSPC;
	need = (uint32_t)need64;
	have = as->s.n_blocks;
	if (need <= have)
		return 0;
	while (have < need) {
		uint32_t n = need - have < KVA_MAX_BATCH ? need - have : KVA_MAX_BATCH;

		rc = kva_blocks_alloc(kv->arena, as->sid, n, as->s.block_table + have, 0);
		if (rc < 0)
			break;
		have += n;
	}
	if (have < need && have > as->s.n_blocks) {
		/* all or nothing: give back what this call took */
		kva_blocks_free(kv->arena, as->sid, have - as->s.n_blocks,
				as->s.block_table + as->s.n_blocks);
		return rc;
	}
	if (have < need)
		return rc;
	as->s.n_blocks = have;
	return 0;
}

int kve_arena_session_share(struct kve_arena_kv *kv,
			    struct kve_arena_session *dst,
			    const struct kve_arena_session *donor,
			    uint32_t n_blocks)
{
	uint32_t done = 0;
	int rc;

	if (!kv || !dst || !donor || !dst->s.block_table || !donor->s.block_table)
		return -EINVAL;
	if (!kv->arena)
		return -EOPNOTSUPP;
	if (dst->s.n_blocks || dst->s.n_tokens || dst == donor)
		return -EBUSY;
	if ((uint64_t)n_blocks * kv->pool.block_tokens > donor->s.n_tokens)
		return -EINVAL;		/* whole, written blocks only */
	if (n_blocks > dst->cap)
		return -ENOSPC;
	while (done < n_blocks) {
		uint32_t n = n_blocks - done < KVA_MAX_BATCH ? n_blocks - done : KVA_MAX_BATCH;

		rc = kva_blocks_share(kv->arena, dst->sid, n, donor->s.block_table + done);
		if (rc < 0) {
			if (done)
				kva_blocks_free(kv->arena, dst->sid, done, donor->s.block_table);
			return rc;
		}
		done += n;
	}
	memcpy(dst->s.block_table, donor->s.block_table, n_blocks * sizeof(uint32_t));
	dst->s.n_blocks = n_blocks;
	dst->s.n_tokens = n_blocks * kv->pool.block_tokens;
	return 0;
}

int kve_arena_session_close(struct kve_arena_kv *kv,
			    struct kve_arena_session *as)
{
	int rc = 0;

	if (!kv || !as)
		return -EINVAL;
	if (!as->s.block_table)
		return 0;
	if (kv->arena)
		rc = kva_session_close(kv->arena, as->sid);
	free(as->s.block_table);
	memset(as, 0, sizeof(*as));
	return rc;
}

int kve_arena_prefill(struct kve_engine *e, struct kve_arena_kv *kv,
		      struct kve_arena_session *as, const int32_t *tokens,
		      uint32_t n_tokens, float *logits)
{
	int rc;

	if (!as)
		return -EINVAL;
	rc = kve_arena_session_reserve(kv, as, n_tokens);
	return rc ? rc : kve_prefill(e, &as->s, tokens, n_tokens, logits);
}

int kve_arena_decode(struct kve_engine *e, struct kve_arena_kv *kv,
		     struct kve_arena_session *const *as,
		     const int32_t *tokens, uint32_t n, float *logits)
{
	struct kve_session *stack[64], **ps = stack;
	uint32_t i;
	int rc = 0;

	if (!as || !n)
		return -EINVAL;
	if (n > 64) {
		ps = malloc(n * sizeof(*ps));
		if (!ps)
			return -ENOMEM;
	}
	for (i = 0; i < n && !rc; i++) {
		if (!as[i])
			rc = -EINVAL;
		else
			rc = kve_arena_session_reserve(kv, as[i], 1);
		if (!rc)
			ps[i] = &as[i]->s;
	}
	if (!rc)
		rc = kve_decode(e, ps, tokens, n, logits);
	if (ps != stack)
		free(ps);
	return rc;
}

/* ---- hand-over ------------------------------------------------------- */

struct msg_hdr {
	uint32_t magic, type, len, reserved;	/* len: payload bytes after */
};

struct msg_session {
	uint32_t n_tokens, n_blocks;
};

static int send_all(int sock, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t w = send(sock, p, n, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int recv_all(int sock, void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n) {
		ssize_t r = recv(sock, p, n, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EPIPE;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int kve_arena_send_pool(int sock, struct kve_arena_kv *kv)
{
	struct {
		struct msg_hdr h;
		struct kve_arena_geom g;
	} m;
	int fd, rc;

	if (!kv || !kv->arena)
		return -EINVAL;
	memset(&m, 0, sizeof(m));
	m.h = (struct msg_hdr){ KVEA_MAGIC, KVEA_POOL, sizeof(m.g), 0 };
	m.g = kv->g;
	fd = kva_arena_data_fd(kv->arena, KVA_EXPORT_CLOEXEC);
	if (fd < 0)
		return fd;
	rc = kva_send_fds(sock, &m, sizeof(m), &fd, 1);
	close(fd);	/* the receiver has its own */
	return rc;
}

int kve_arena_recv_pool(int sock, const struct kve_model *m,
			struct kve_arena_kv **kvp, char *err, size_t errlen)
{
	struct {
		struct msg_hdr h;
		struct kve_arena_geom g;
	} mb;
	unsigned int nfd = 1;
	int fd = -1, rc;

	if (!kvp)
		return -EINVAL;
	*kvp = NULL;
	/* Exactly one fd: more, or a truncated message, is refused. */
	rc = kva_recv_fds(sock, &mb, sizeof(mb), &fd, &nfd);
	if (!rc && (mb.h.magic != KVEA_MAGIC || mb.h.type != KVEA_POOL ||
		    mb.h.len != sizeof(mb.g)))
		rc = -EPROTO;
	if (!rc && nfd != 1)
		rc = -EBADMSG;
	if (rc) {
		set_err(err, errlen, "kv_arena: receiving the pool: %s", strerror(-rc));
	} else {
		rc = kve_arena_kv_map(m, fd, &mb.g, kvp, err, errlen);
	}
	if (fd >= 0 && nfd == 1)
		close(fd);
	return rc;
}

int kve_arena_send_session(int sock, const struct kve_session *s)
{
	struct {
		struct msg_hdr h;
		struct msg_session s;
	} m;
	int rc;

	if (!s || (s->n_blocks && !s->block_table) || s->n_blocks > KVEA_MAX_IDS)
		return -EINVAL;
	memset(&m, 0, sizeof(m));
	m.h = (struct msg_hdr){ KVEA_MAGIC, KVEA_SESSION,
				(uint32_t)(sizeof(m.s) + s->n_blocks * sizeof(uint32_t)), 0 };
	m.s = (struct msg_session){ s->n_tokens, s->n_blocks };
	rc = send_all(sock, &m, sizeof(m));
	if (!rc && s->n_blocks)
		rc = send_all(sock, s->block_table, s->n_blocks * sizeof(uint32_t));
	return rc;
}

int kve_arena_recv_session(int sock, const struct kve_arena_kv *kv,
			   struct kve_session *s)
{
	struct {
		struct msg_hdr h;
		struct msg_session s;
	} m;
	uint32_t i, *tab;
	int rc;

	if (!kv || !s)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	rc = recv_all(sock, &m, sizeof(m));
	if (rc)
		return rc;
	if (m.h.magic != KVEA_MAGIC || m.h.type != KVEA_SESSION ||
	    m.s.n_blocks > KVEA_MAX_IDS ||
	    m.h.len != sizeof(m.s) + m.s.n_blocks * sizeof(uint32_t))
		return -EPROTO;
	tab = malloc((m.s.n_blocks ? m.s.n_blocks : 1) * sizeof(uint32_t));
	if (!tab)
		return -ENOMEM;
	rc = recv_all(sock, tab, m.s.n_blocks * sizeof(uint32_t));
	for (i = 0; !rc && i < m.s.n_blocks; i++)
		if (tab[i] >= kv->g.blocks_total)
			rc = -EINVAL;
	if (!rc && (uint64_t)m.s.n_tokens > (uint64_t)m.s.n_blocks * kv->pool.block_tokens)
		rc = -EINVAL;
	if (rc) {
		free(tab);
		return rc;
	}
	s->block_table = tab;
	s->n_blocks = m.s.n_blocks;
	s->n_tokens = m.s.n_tokens;
	return 0;
}
