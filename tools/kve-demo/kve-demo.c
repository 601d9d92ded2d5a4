// SPDX-License-Identifier: MIT
/*
 * kve-demo - the CPU engine as two pipeline stages over one kvarena arena:
 * this process (the prefill worker) tokenizes a prompt and prefills it into
 * arena blocks, then starts a decode worker (a fresh exec of itself) and
 * hands it the arena's data fd (the dma-buf with kvarena.ko, else the
 * memfd) and the session's block table over a Unix socket. The decode
 * worker maps the arena, generates tokens with the KV in place (appending
 * its own to the same blocks), prints the text and returns the token ids.
 * The prefill worker then decodes the same prompt itself, in a second
 * session, and checks that the two agree token for token.
 *
 * usage: kve-demo MODEL PROMPT [--tokens N] [--temp T] [--seed S]
 * Exit status 0 when both workers agree, 1 otherwise, 2 for bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvengine.h"
#include "kv_arena.h"

#define MAX_PROMPT 512
#define MAX_GEN 256

struct opts {
	const char *model, *prompt;
	uint32_t n_gen;
	float temp;
	uint64_t seed;
};

static int io_all(int fd, void *buf, size_t n, int wr)
{
	uint8_t *p = buf;

	while (n) {
		ssize_t r = wr ? write(fd, p, n) : read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Generates o->n_gen tokens after `first` in session s; ids to out. */
static int generate(struct kve_engine *e, struct kve_session *s, int32_t first,
		    const struct opts *o, uint32_t vocab, int32_t *out, float *lg, void *scratch)
{
	struct kve_sampler sm = { o->temp, 0, 0, kve_rng_seed(o->seed + 1), 0 };
	int32_t next = first;
	uint32_t i;
	int rc;

	for (i = 0; i < o->n_gen; i++) {
		rc = kve_decode(e, &s, &next, 1, lg);
		if (rc)
			return rc;
		next = kve_sample(&sm, lg, vocab, scratch);
		if (next < 0)
			return next;
		out[i] = next;
	}
	return 0;
}

static void print_text(const struct kve_tokenizer *t, const int32_t *ids, uint32_t n)
{
	struct kve_detok d;
	char buf[512];
	uint32_t i;
	int k;

	kve_detok_init(&d, t);
	for (i = 0; i < n; i++) {
		k = kve_detok_push(&d, ids[i], buf, sizeof(buf));
		/* random weights pick random byte tokens too: bytes outside
		 * printable ASCII are shown as '.' */
		for (int j = 0; j < k; j++)
			putchar(buf[j] >= 0x20 && buf[j] < 0x7f ? buf[j] : '.');
	}
	k = kve_detok_flush(&d, buf, sizeof(buf));
	for (int j = 0; j < k; j++)
		putchar(buf[j] >= 0x20 && buf[j] < 0x7f ? buf[j] : '.');
}

/* The decode worker: socket fd, then the same options. */
static int decode_worker(int sock, const struct opts *o)
{
	struct kve_engine_params ep = { 1, 1, 0, 0 };
	struct kve_arena_kv *kv = NULL;
	struct kve_session s = { 0 };
	struct kve_tokenizer *t;
	struct kve_engine *e;
	struct kve_model *m;
	int32_t first, ids[MAX_GEN];
	char err[256];
	float *lg;
	void *scratch;
	int rc;

	m = kve_model_load(o->model, err, sizeof(err));
	t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	if (!t || kve_arena_recv_pool(sock, m, &kv, err, sizeof(err)) ||
	    kve_arena_recv_session(sock, kv, &s) || io_all(sock, &first, 4, 0)) {
		fprintf(stderr, "kve-demo: decode worker: %s\n", t ? err : err[0] ? err : "setup");
		return 1;
	}
	printf("decode  pid %d: mapped the arena from the fd it was sent; session of %u tokens "
	       "in %u blocks\n", (int)getpid(), s.n_tokens, s.n_blocks);
	ep.max_ctx = s.n_tokens + o->n_gen + 1;
	e = kve_engine_create(m, kve_arena_kv_pool(kv), &ep, err, sizeof(err));
	lg = malloc(sizeof(float) * kve_model_info(m)->vocab);
	scratch = malloc(KVE_SAMPLE_SCRATCH(kve_model_info(m)->vocab));
	rc = e && lg && scratch ? generate(e, &s, first, o, kve_model_info(m)->vocab, ids, lg,
					   scratch) : -ENOMEM;
	if (rc) {
		fprintf(stderr, "kve-demo: decode worker: %s\n", e ? strerror(-rc) : err);
		return 1;
	}
	printf("decode  pid %d: %u tokens decoded with the KV in place; the text (random "
	       "weights, so noise):\n  \"", (int)getpid(), o->n_gen);
	print_text(t, ids, o->n_gen);
	printf("\"\n");
	fflush(stdout);
	rc = io_all(sock, ids, sizeof(int32_t) * o->n_gen, 1);
	kve_engine_free(e);
	kve_arena_kv_destroy(kv);
	free(s.block_table);
	free(lg);
	free(scratch);
	kve_tokenizer_free(t);
	kve_model_free(m);
	return rc ? 1 : 0;
}

/* Opens a session, prefills the prompt, reserves room for the generation
 * and samples the first token. */
static int prefill(struct kve_engine *e, struct kve_arena_kv *kv, struct kve_arena_session *as,
		   uint64_t cookie, const int32_t *tok, uint32_t n, const struct opts *o,
		   uint32_t vocab, float *lg, void *scratch, int32_t *first)
{
	struct kve_sampler sm = { o->temp, 0, 0, kve_rng_seed(o->seed), 0 };
	int rc = kve_arena_session_open(kv, cookie, n + o->n_gen + 1, as);

	rc = rc ? rc : kve_arena_prefill(e, kv, as, tok, n, lg);
	rc = rc ? rc : kve_arena_session_reserve(kv, as, o->n_gen);
	if (rc)
		return rc;
	*first = kve_sample(&sm, lg, vocab, scratch);
	return *first < 0 ? *first : 0;
}

static int run(const struct opts *o, const char *self)
{
	struct kve_arena_kv_params ap = { 0 };
	struct kve_engine_params ep = { 1, 1, 0, 0 };
	struct kve_arena_session a = { 0 }, b = { 0 };
	struct kve_arena_geom g;
	struct kve_arena_kv *kv = NULL;
	struct kve_tokenizer *t = NULL;
	struct kve_engine *e = NULL;
	struct kve_model *m;
	const struct kve_model_info *in;
	int32_t tok[MAX_PROMPT], first, theirs[MAX_GEN], mine[MAX_GEN];
	char err[256] = "", fdarg[16], ngen[16], temp[32], seed[32];
	int sv[2], n, status = -1, rc = 1;
	float *lg = NULL;
	void *scratch = NULL;
	pid_t pid;

	m = kve_model_load(o->model, err, sizeof(err));
	t = m ? kve_tokenizer_create(m, err, sizeof(err)) : NULL;
	if (!t)
		goto fail;
	in = kve_model_info(m);
	n = kve_tokenize(t, o->prompt, strlen(o->prompt), 1, tok, MAX_PROMPT);
	if (n <= 0 || n > MAX_PROMPT || (uint32_t)n + o->n_gen + 1 > in->ctx_len) {
		snprintf(err, sizeof(err), "the prompt is %d tokens; with %u to generate it must "
			 "fit in %d and in the model's context of %u", n, o->n_gen, MAX_PROMPT,
			 in->ctx_len);
		goto fail;
	}
	ap.backend = KVA_BACKEND_AUTO;	/* kvarena.ko when /dev/kvarena opens */
	ap.block_tokens = 16;
	ap.n_blocks = 2 * (((uint32_t)n + o->n_gen + 16) / 16);
	ap.dtype = KVE_KV_F16;
	ap.name = "kve-demo";
	if (kve_arena_kv_create(m, &ap, &kv, err, sizeof(err)))
		goto fail;
	kve_arena_kv_geom(kv, &g);
	ep.max_ctx = (uint32_t)n + o->n_gen + 1;
	ep.max_chunk = (uint32_t)n;
	e = kve_engine_create(m, kve_arena_kv_pool(kv), &ep, err, sizeof(err));
	lg = malloc(sizeof(float) * in->vocab);
	scratch = malloc(KVE_SAMPLE_SCRATCH(in->vocab));
	if (!e || !lg || !scratch) {
		if (e)
			snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}
	printf("prefill pid %d: %s model, dim %u, %u layers, %s kernels; KV in a %s arena, "
	       "%u-token blocks of %u KiB\n", (int)getpid(), in->arch, in->dim, in->n_layers,
	       kve_isa_name(),
	       kve_arena_kv_backend(kv) == KVA_BACKEND_KERNEL ? "kvarena.ko (dma-buf)" : "memfd",
	       g.block_tokens, g.block_size / 1024);
	if (prefill(e, kv, &a, 1, tok, (uint32_t)n, o, in->vocab, lg, scratch, &first)) {
		snprintf(err, sizeof(err), "prefill failed");
		goto fail;
	}
	printf("prefill pid %d: \"%s\" -> %d tokens, prefilled into %u blocks; starting the "
	       "decode worker\n", (int)getpid(), o->prompt, n, (n + g.block_tokens - 1) /
	       g.block_tokens);
	fflush(stdout);

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		snprintf(err, sizeof(err), "socketpair: %s", strerror(errno));
		goto fail;
	}
	fcntl(sv[0], F_SETFD, FD_CLOEXEC);
	snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
	snprintf(ngen, sizeof(ngen), "%u", o->n_gen);
	snprintf(temp, sizeof(temp), "%g", (double)o->temp);
	snprintf(seed, sizeof(seed), "%llu", (unsigned long long)o->seed);
	pid = fork();
	if (pid == 0) {
		execl(self, "kve-demo", "--decode-worker", fdarg, o->model, o->prompt,
		      "--tokens", ngen, "--temp", temp, "--seed", seed, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	rc = pid < 0 || kve_arena_send_pool(sv[0], kv) || kve_arena_send_session(sv[0], &a.s) ||
	     io_all(sv[0], &first, 4, 1) || io_all(sv[0], theirs, sizeof(int32_t) * o->n_gen, 0);
	close(sv[0]);
	if (pid > 0)
		waitpid(pid, &status, 0);
	if (rc || !WIFEXITED(status) || WEXITSTATUS(status)) {
		snprintf(err, sizeof(err), "the decode worker failed (wait status %d)", status);
		rc = 1;
		goto fail;
	}

	/* the same request decoded here, in a second session */
	if (prefill(e, kv, &b, 2, tok, (uint32_t)n, o, in->vocab, lg, scratch, &first) ||
	    generate(e, &b.s, first, o, in->vocab, mine, lg, scratch)) {
		snprintf(err, sizeof(err), "decoding in this process failed");
		rc = 1;
		goto fail;
	}
	rc = memcmp(mine, theirs, sizeof(int32_t) * o->n_gen) != 0;
	printf("prefill pid %d: the same request decoded in this process: %s\n", (int)getpid(),
	       rc ? "DIFFERENT tokens" : "the same tokens");
	goto out;
fail:
	fprintf(stderr, "kve-demo: %s\n", err);
out:
	if (a.s.block_table)
		kve_arena_session_close(kv, &a);
	if (b.s.block_table)
		kve_arena_session_close(kv, &b);
	kve_engine_free(e);
	kve_arena_kv_destroy(kv);
	free(lg);
	free(scratch);
	kve_tokenizer_free(t);
	kve_model_free(m);
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o = { NULL, NULL, 24, 0, 42 };
	int a = 1, sock = -1;

	if (argc > 2 && !strcmp(argv[1], "--decode-worker")) {
		sock = atoi(argv[2]);
		a = 3;
	}
	if (argc - a < 2) {
		fprintf(stderr, "usage: kve-demo MODEL PROMPT [--tokens N] [--temp T] [--seed S]\n");
		return 2;
	}
	o.model = argv[a];
	o.prompt = argv[a + 1];
	for (a += 2; a < argc; a += 2) {
		if (a + 1 >= argc)
			goto bad;
		if (!strcmp(argv[a], "--tokens"))
			o.n_gen = (uint32_t)strtoul(argv[a + 1], NULL, 0);
		else if (!strcmp(argv[a], "--temp"))
			o.temp = strtof(argv[a + 1], NULL);
		else if (!strcmp(argv[a], "--seed"))
			o.seed = strtoull(argv[a + 1], NULL, 0);
		else
			goto bad;
	}
	if (!o.n_gen || o.n_gen > MAX_GEN) {
		fprintf(stderr, "kve-demo: --tokens must be 1..%d\n", MAX_GEN);
		return 2;
	}
	if (sock >= 0)
		return decode_worker(sock, &o);
	{	/* the decode worker is this binary: its path, not /proc/self/exe
		 * (under valgrind that would be valgrind) */
		char self[4096];
		ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);

		if (k <= 0)
			return 1;
		self[k] = 0;
		return run(&o, self);
	}
bad:
	fprintf(stderr, "kve-demo: unknown or incomplete option %s\n", argv[a]);
	return 2;
}
