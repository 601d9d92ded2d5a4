// SPDX-License-Identifier: MIT
/*
 * kvt-bench - BENCH=tier: one session's KV through the disk tier against
 * the file system's own limit, and restoring it against recomputing it.
 *
 *  1. The CPU engine prefills N tokens of a model into a libkvarena arena
 *     (the recompute time), decodes one more token (reference logits).
 *  2. R rounds, interleaved in one run: fio's sequential O_DIRECT write of
 *     the session's bytes, our spill of its blocks, fio's read of them,
 *     our restore into fresh blocks (checksums verified); medians.
 *  3. The restored session decodes the same token: its logits must equal
 *     the reference bit for bit (else the benchmark fails).
 *
 * Rows (ROW\tname\tvalue\tunit\tpeer\tpeer_value\tratio) for run-bench.sh.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kv_arena.h"
#include "kvengine.h"
#include "kvtier.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* fio's bandwidth in bytes/s for one sequential O_DIRECT pass, or -1. */
static double fio_pass(const char *fio, const char *dir, const char *rw, uint32_t bs,
		       uint64_t bytes, uint32_t qd)
{
	char cmd[2048], *out = NULL;
	size_t cap = 0, len = 0;
	json_t *j, *job;
	double bw = -1;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "%s --name=kvt --filename=%s/fio.kvbench --rw=%s --bs=%u --size=%llu "
		 "--direct=1 --ioengine=io_uring --iodepth=%u --numjobs=1 --end_fsync=0 "
		 "--output-format=json 2>/dev/null",
		 fio, dir, rw, bs, (unsigned long long)bytes, qd);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	for (;;) {
		if (len + 4096 > cap) {
			char *n = realloc(out, cap + 65536);

			if (!n)
				break;
			out = n;
			cap += 65536;
		}
		size_t r = fread(out + len, 1, cap - len - 1, p);

		if (!r)
			break;
		len += r;
	}
	pclose(p);
	if (!out)
		return -1;
	out[len] = 0;
	j = json_loads(out, 0, NULL);
	free(out);
	job = j ? json_array_get(json_object_get(j, "jobs"), 0) : NULL;
	if (job) {
		json_t *side = json_object_get(job, strcmp(rw, "write") ? "read" : "write");

		bw = (double)json_integer_value(json_object_get(side, "bw_bytes"));
	}
	json_decref(j);
	return bw > 0 ? bw : -1;
}

static int wait_one(struct kvt *t, struct kvt_done *d)
{
	for (;;) {
		struct pollfd pfd = { .fd = kvt_event_fd(t), .events = POLLIN };

		if (kvt_reap(t, d, 1) == 1)
			return 0;
		if (poll(&pfd, 1, 60000) <= 0)
			return -ETIMEDOUT;
	}
}

static uint64_t shape_id(const struct kve_arena_geom *g)
{
	uint32_t v[6] = { g->n_layers, g->n_kv_heads, g->head_dim, g->dtype, g->block_tokens,
			  g->kv_block_bytes };

	return kvt_tokens_hash((const int32_t *)v, 6);
}

static const char usage[] =
	"usage: kvt-bench --dir DIR --model FILE [--tokens N] [--runs R] [--threads T]\n"
	"                 [--fio PATH] [--fixed auto|on|off] [--qd N]\n";

int main(int argc, char **argv)
{
	const char *dir = NULL, *model = NULL, *fio = "fio", *fixed_s = "auto";
	uint32_t tokens = 8192, runs = 3, threads = 1, qd = 32, i, nb;
	struct kve_arena_kv_params ap = { 0 };
	struct kve_arena_session a = { 0 }, b = { 0 };
	struct kve_engine_params ep = { 0 };
	struct kve_arena_kv *kv = NULL;
	struct kve_engine *e = NULL;
	struct kve_arena_geom g;
	struct kve_model *m;
	struct kvt *t = NULL;
	struct kvt_params tp = { 0 };
	struct kvt_geom tg;
	struct kvt_ident id;
	float *ref, *got;
	int32_t *tok, next;
	double t0, recompute_s, *fw, *fr, *ws, *rs;
	uint64_t bytes;
	char err[512];
	void *base;
	int rc, c, fails = 0;
	static const struct option lo[] = {
		{ "dir", 1, NULL, 'd' }, { "model", 1, NULL, 'm' }, { "tokens", 1, NULL, 'n' },
		{ "runs", 1, NULL, 'r' }, { "threads", 1, NULL, 't' }, { "fio", 1, NULL, 'f' },
		{ "fixed", 1, NULL, 'x' }, { "qd", 1, NULL, 'q' }, { NULL, 0, NULL, 0 },
	};

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'm': model = optarg; break;
		case 'n': tokens = (uint32_t)atoi(optarg); break;
		case 'r': runs = (uint32_t)atoi(optarg); break;
		case 't': threads = (uint32_t)atoi(optarg); break;
		case 'f': fio = optarg; break;
		case 'x': fixed_s = optarg; break;
		case 'q': qd = (uint32_t)atoi(optarg); break;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (!dir || !model || !tokens || !runs || runs > 50) {
		fputs(usage, stderr);
		return 2;
	}
	m = kve_model_load(model, err, sizeof(err));
	if (!m) {
		fprintf(stderr, "kvt-bench: %s\n", err);
		return 1;
	}
	if (kve_model_info(m)->ctx_len < tokens + 1) {
		fprintf(stderr, "kvt-bench: the model's context (%u) is shorter than %u tokens\n",
			kve_model_info(m)->ctx_len, tokens + 1);
		return 1;
	}
	/* room for two copies of the session */
	ap.backend = KVA_BACKEND_AUTO;
	ap.block_tokens = 16;
	ap.dtype = KVE_KV_F16;
	ap.n_blocks = 2 * ((tokens + 1 + 15) / 16) + 8;
	ap.name = "kvt-bench";
	rc = kve_arena_kv_create(m, &ap, &kv, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "kvt-bench: arena: %s\n", err);
		return 1;
	}
	kve_arena_kv_geom(kv, &g);
	kva_arena_map(kve_arena_kv_arena(kv), &base);
	ep.n_threads = threads;
	ep.max_batch = 1;
	ep.max_ctx = tokens + 1;
	e = kve_engine_create(m, kve_arena_kv_pool(kv), &ep, err, sizeof(err));
	tok = malloc((size_t)tokens * sizeof(*tok));
	ref = malloc(kve_model_info(m)->vocab * sizeof(float));
	got = malloc(kve_model_info(m)->vocab * sizeof(float));
	if (!e || !tok || !ref || !got) {
		fprintf(stderr, "kvt-bench: engine: %s\n", err);
		return 1;
	}
	srand(7);
	for (i = 0; i < tokens; i++)
		tok[i] = 3 + rand() % (int)(kve_model_info(m)->vocab - 3);
	next = tok[tokens / 2];
	if (kve_arena_session_open(kv, 1, tokens + 1, &a) ||
	    kve_arena_session_reserve(kv, &a, tokens + 1) ||
	    kve_arena_session_open(kv, 2, tokens + 1, &b) ||
	    kve_arena_session_reserve(kv, &b, tokens + 1)) {
		fprintf(stderr, "kvt-bench: sessions: no room\n");
		return 1;
	}
	printf("kvt-bench: %u tokens, %u blocks of %u KiB (%u tokens), %.1f MiB of KV\n", tokens,
	       (tokens + 15) / 16, g.block_size >> 10, g.block_tokens,
	       (double)((tokens + 15) / 16) * g.block_size / 1048576.0);
	t0 = now_s();
	rc = kve_arena_prefill(e, kv, &a, tok, tokens, got);
	recompute_s = now_s() - t0;
	if (rc) {
		fprintf(stderr, "kvt-bench: prefill: %s\n", strerror(-rc));
		return 1;
	}
	printf("  recompute (prefill, %u thread%s): %.2f s, %.0f tok/s\n", threads,
	       threads > 1 ? "s" : "", recompute_s, tokens / recompute_s);

	tg.block_size = g.block_size;
	tg.blocks_per_page = g.blocks_per_page;
	tg.blocks_total = g.blocks_total;
	tg.block_tokens = g.block_tokens;
	tg.shape_id = shape_id(&g);
	tp.dir = dir;
	tp.direct = KVT_AUTO;
	tp.fixed = !strcmp(fixed_s, "on") ? KVT_ON : !strcmp(fixed_s, "off") ? KVT_OFF : KVT_AUTO;
	tp.queue_depth = qd;
	rc = kvt_open(&tp, &tg, base, g.arena_bytes, &t, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "kvt-bench: tier: %s\n", err);
		return 1;
	}
	printf("  tier: %s\n", kvt_describe(t));
	nb = (tokens + g.block_tokens - 1) / g.block_tokens;
	bytes = (uint64_t)nb * g.block_size;
	id.key = 1;
	id.n_tokens = tokens;
	id.tokens_hash = kvt_tokens_hash(tok, tokens);
	fw = calloc(runs, sizeof(double));
	fr = calloc(runs, sizeof(double));
	ws = calloc(runs, sizeof(double));
	rs = calloc(runs, sizeof(double));
	for (i = 0; i < runs; i++) {
		struct kvt_done d;
		kvt_file_id f;

		fw[i] = fio_pass(fio, dir, "write", g.block_size, bytes, qd);
		t0 = now_s();
		if (kvt_spill(t, &id, a.s.block_table, nb, NULL, &f) || wait_one(t, &d) || d.status) {
			fprintf(stderr, "kvt-bench: spill failed\n");
			return 1;
		}
		ws[i] = (double)bytes / (now_s() - t0);
		fr[i] = fio_pass(fio, dir, "read", g.block_size, bytes, qd);
		memset(kva_arena_block_ptr(kve_arena_kv_arena(kv), b.s.block_table[0]), 0, 4096);
		t0 = now_s();
		if (kvt_restore(t, f, &id, 0, nb, b.s.block_table, NULL) || wait_one(t, &d) ||
		    d.status) {
			fprintf(stderr, "kvt-bench: restore failed: %s\n", strerror(-d.status));
			return 1;
		}
		rs[i] = (double)bytes / (now_s() - t0);
		kvt_drop(t, f);
		printf("  run %u: spill %.0f MB/s (fio write %.0f), restore %.0f MB/s (fio read %.0f)\n",
		       i + 1, ws[i] / 1e6, fw[i] / 1e6, rs[i] / 1e6, fr[i] / 1e6);
	}
	{
		char p[1024];

		snprintf(p, sizeof(p), "%s/fio.kvbench", dir);
		unlink(p);
	}
	/* the restored KV decodes exactly as the original */
	b.s.n_tokens = tokens;
	rc = kve_arena_decode(e, kv, (struct kve_arena_session *[]){ &a }, &next, 1, ref);
	rc = rc ? rc : kve_arena_decode(e, kv, (struct kve_arena_session *[]){ &b }, &next, 1, got);
	if (rc || memcmp(ref, got, kve_model_info(m)->vocab * sizeof(float))) {
		fprintf(stderr, "kvt-bench: the restored session's logits differ from the original's\n");
		fails++;
	} else {
		printf("  restored session: next-token logits bit-identical to the original's\n");
	}
	{
		double w = median(ws, (int)runs), r = median(rs, (int)runs);
		double fwm = median(fw, (int)runs), frm = median(fr, (int)runs);
		double restore_ms = (double)bytes / r * 1e3;

		printf("ROW\ttier_spill_mbps_%uk\t%.0f\tMB/s\tfio_write\t%.0f\t%.2f\n", tokens / 1024,
		       w / 1e6, fwm / 1e6, fwm > 0 ? w / fwm : 0);
		printf("ROW\ttier_restore_mbps_%uk\t%.0f\tMB/s\tfio_read\t%.0f\t%.2f\n", tokens / 1024,
		       r / 1e6, frm / 1e6, frm > 0 ? r / frm : 0);
		printf("ROW\ttier_restore_vs_recompute_%uk\t%.1f\tms\trecompute\t%.1f\t%.1f\n",
		       tokens / 1024, restore_ms, recompute_s * 1e3, recompute_s * 1e3 / restore_ms);
	}
	kvt_close(t);
	kve_arena_session_close(kv, &a);
	kve_arena_session_close(kv, &b);
	kve_engine_free(e);
	kve_arena_kv_destroy(kv);
	kve_model_free(m);
	free(tok);
	free(ref);
	free(got);
	free(fw);
	free(fr);
	free(ws);
	free(rs);
	return fails ? 1 : 0;
}
