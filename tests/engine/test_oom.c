// SPDX-License-Identifier: MIT
/*
 * test_oom.c - allocation failures. Each of the engine's constructors (model
 * from memory and from its file, tokenizer, engine, KV arena and arena session), the
 * tokenizer's long-word path, constrained decoding's grammar compiler
 * (first model only) and the kernels' self-check is run with its k-th
 * allocation failing, for k = 0, 1, ... until a run makes fewer than k + 1 allocations: every run
 * with a failure must return an error (NULL with a message, or -ENOMEM),
 * never crash, and leak nothing (ASan's leak check at exit).
 *
 * Linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,
 * --wrap=aligned_alloc,--wrap=strdup (engine.mk), so the engine's and libkvarena's calls
 * come here, and so do PCRE2's match data and its interpreter's frames (the
 * tokenizer hands PCRE2 the engine's allocator); libc and the rest of
 * libpcre2 allocate on their own. jansson allocates
 * through json_set_alloc_funcs (set here, for this process only): the
 * grammar compiles are also run with jansson's k-th allocation failing
 * (the engine's not), which must be out of memory too, not a bad schema.
 *
 * usage: test_oom MODEL...
 */
#include <errno.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "engine_internal.h"
#include "kvconstrain.h"
#include "nojit.h"
#include "tcheck.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);
char *__real_strdup(const char *s);
char *__wrap_strdup(const char *s);

static long fail_at = -1, calls;
static int jansson_only;	/* count and fail jansson's allocations, not ours */

static int failing(int from_jansson)
{
	return fail_at >= 0 && from_jansson == jansson_only && calls++ == fail_at;
}

void *__wrap_malloc(size_t n)
{
	return failing(0) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return failing(0) ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
	return failing(0) ? NULL : __real_realloc(p, n);
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
	return failing(0) ? NULL : __real_aligned_alloc(align, n);
}

/* strdup allocates inside libc, where the wrap above cannot see it */
char *__wrap_strdup(const char *s)
{
	return failing(0) ? NULL : __real_strdup(s);
}

/* jansson's allocator (json_set_alloc_funcs): libc's, failing on request */
static void *jansson_malloc(size_t n)
{
	return failing(1) ? NULL : __real_malloc(n);
}

static void jansson_free(void *p)
{
	free(p);
}

/*
 * jansson is not exact under allocation failures: it gets over some (a
 * compile then succeeds: counted in absorbed), its lexer reports others
 * as syntax errors ("string or '}' expected") and drops a byte of a
 * string on others (a schema keyword misspelt: -EINVAL naming it). So
 * while a compile parses and dumps the spec (kvc_spec_key twice, then
 * kvc_spec_nfa's parse: jansson's allocations below lenient_below) -EINVAL
 * with a message passes too. The allocations after, for a property
 * name's, an enum value's or a tool name's text, must say out of memory.
 */
static long lenient_below, absorbed;

/* What is being built: 0 or a negative errno, err set on failure. */
typedef int (*build_fn)(void *ctx, char *err, size_t errlen);

/*
 * Runs fn with allocation k failing for k = 0, 1, ... Returns how many
 * allocations a full run makes, or -1 after printing what went wrong.
 */
#define STALE "(a message left by an earlier call)"

static long each_failure(const char *what, build_fn fn, void *ctx)
{
	long k;

	for (k = 0; k < 100000; k++) {
		char err[256] = STALE;	/* a failure must write its own message */
		int rc;

		calls = 0;
		fail_at = k;
		rc = fn(ctx, err, sizeof(err));
		fail_at = -1;
		if (calls <= k) {	/* allocation k never happened */
			if (rc) {
				printf("# %s: fails (%d: %s) with no allocation failing\n",
				       what, rc, err);
				return -1;
			}
			return k;
		}
		if (jansson_only && !rc) {	/* jansson got over it */
			absorbed++;
			continue;
		}
		if (k < lenient_below && rc == -EINVAL && err[0] && strcmp(err, STALE))
			continue;
		if (rc != -ENOMEM || !err[0] || !strcmp(err, STALE)) {
			printf("# %s: allocation %ld of %ld failed, result %d \"%s\"\n", what, k,
			       calls, rc, err);
			return -1;
		}
	}
	return -1;
}

struct ctx {
	const char *path;
	const uint8_t *file;
	size_t len;
	struct kve_model *m;
	struct kve_tokenizer *t;
	struct kvc_vocab *v;
	const struct kvc_spec *spec;
	struct kvc_grammar *g;		/* use_matcher: any JSON object */
	uint32_t *mask;
	int32_t byte_tok[128];		/* the one-byte tokens of ASCII, or -1 */
	struct kve_arena_kv *kv;	/* map_and_recv: the arena to map */
};

/* from its file when c->path is set, else from memory */
static int build_model(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	struct kve_model *m = c->path ? kve_model_load(c->path, err, errlen) :
			      kve_model_load_mem(c->file, c->len, err, errlen);

	if (!m)
		return strstr(err, "out of memory") ? -ENOMEM : -EINVAL;
	kve_model_free(m);
	return 0;
}

static int build_tokenizer(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	struct kve_tokenizer *t = kve_tokenizer_create(c->m, err, errlen);

	if (!t)
		return strstr(err, "out of memory") ? -ENOMEM : -EINVAL;
	kve_tokenizer_free(t);
	return 0;
}

/* a word of 100 letters (BPE: past the 64-id stack buffer) and a long
 * streamed decode */
static int tokenize_long(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	char text[160], out[512];
	int32_t ids[256];
	struct kve_detok d;
	int n, i, w;

	memset(text, 'a', 100);
	memcpy(text + 100, " Hello, w\xc3\xb6rld", 15);
	n = kve_tokenize(c->t, text, 115, 1, ids, 256);
	if (n < 0) {
		snprintf(err, errlen, "tokenize: %s", strerror(-n));
		return n;
	}
	kve_detok_init(&d, c->t);
	for (i = 0; i < n; i++) {
		w = kve_detok_push(&d, ids[i], out, sizeof(out));
		if (w < 0) {
			snprintf(err, errlen, "detok: %s", strerror(-w));
			return w;
		}
	}
	return 0;
}

/* the kernels' run-time self-check (selfcheck.c), the portable set
 * against itself: it allocates its inputs and results per shape */
static int run_selfcheck(void *p, char *err, size_t errlen)
{
	(void)p;
	if (!kve_kernels_selfcheck(&kve_kernels_c, &kve_kernels_c, err, errlen))
		return 0;
	return strstr(err, "out of memory") ? -ENOMEM : -EINVAL;
}

/* the C set standing in for an unproven avx512 one, picked on a CPU
 * with AVX-512: the self-check guards it */
static struct kve_kernels stand;

static const struct kve_kernels *pick_stand(char *log, size_t loglen)
{
	const struct kve_kernel_sets s = { NULL, &stand, NULL, NULL, &kve_kernels_c };

	stand = kve_kernels_c;
	stand.name = "avx512";
	return kve_kernels_pick_sets(KVE_CPU_AVX2 | KVE_CPU_AVX512, NULL, 0, &s, log, loglen);
}

/* picking a set the self-check guards: a short allocation in the check
 * is no verdict, so the pick fails (to be retried), not falls back */
static int run_pick(void *p, char *err, size_t errlen)
{
	const struct kve_kernels *k;

	(void)p;
	/* first with no log, whatever its length says: nothing written */
	k = pick_stand(NULL, errlen);
	if (!k) {
		snprintf(err, errlen, "no set picked, no log asked for");
		return -ENOMEM;
	}
	k = pick_stand(err, errlen);
	if (!k)
		return strstr(err, "avx512 kernel self-check could not run (self-check: out "
			      "of memory)") ? -ENOMEM : -EINVAL;
	return k == &stand ? 0 : -EINVAL;
}

static int build_engine(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	struct kve_engine_params ep = { 2, 2, 4, 16 };
	struct kve_kv_pool kp;
	struct tpool tp;
	struct kve_engine *e;
	long k = fail_at;
	int rc;

	fail_at = -1;	/* the test's own pool is not under test */
	rc = tpool_init(&tp, c->m, 4, KVE_KV_F32, 4, &kp);
	fail_at = k;
	if (rc)
		return -EIO;
	e = kve_engine_create(c->m, &kp, &ep, err, errlen);
	rc = e ? 0 : strstr(err, "out of memory") ? -ENOMEM : -EINVAL;
	kve_engine_free(e);
	fail_at = -1;
	tpool_free(&tp);
	return rc;
}

static int build_arena(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	struct kve_arena_kv_params ap = { .backend = KVA_BACKEND_MEMFD, .n_blocks = 8,
					  .block_tokens = 4, .dtype = KVE_KV_F16,
					  .name = "oom" };
	struct kve_arena_kv *kv = NULL;
	struct kve_arena_session as;
	int rc = kve_arena_kv_create(c->m, &ap, &kv, err, errlen);

	if (rc)
		return rc;
	rc = kve_arena_session_open(kv, 1, 32, &as);
	if (!rc) {
		rc = kve_arena_session_reserve(kv, &as, 32);
		kve_arena_session_close(kv, &as);
	}
	if (rc)
		snprintf(err, errlen, "session: %s", strerror(-rc));
	kve_arena_kv_destroy(kv);
	return rc;
}

/* constrained decoding's vocabulary: token bytes and their trie */
static int build_vocab(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	struct kvc_vocab *v = kvc_vocab_create(c->t, kve_model_info(c->m)->vocab, err, errlen);

	if (!v)
		return strstr(err, "out of memory") ? -ENOMEM : -EINVAL;
	kvc_vocab_free(v);
	return 0;
}

/* a matcher of any JSON object: created, nested to the depth limit (the
 * mask's slow path there walks with a walker it allocates on first use),
 * then cloned and masked again */
static int use_matcher(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	struct kvc_matcher *m = kvc_matcher_create(c->g, 0), *k = NULL;
	int rc = m ? 0 : -ENOMEM, d;
	const char *q;

	for (q = "{\"a\":"; !rc && *q; q++)
		rc = kvc_advance(m, c->byte_tok[(int)*q]);
	for (d = 0; !rc && d < KVC_MAX_DEPTH + 2; d++) {	/* '[' until refused */
		rc = kvc_mask(m, c->mask);
		rc = rc < 0 ? rc : kvc_advance(m, c->byte_tok['[']);
	}
	if (rc == -EPERM && d < KVC_MAX_DEPTH + 2)
		rc = 0;
	if (!rc) {
		k = kvc_matcher_clone(m);
		rc = k ? kvc_mask(k, c->mask) : -ENOMEM;
	}
	kvc_matcher_free(k);
	kvc_matcher_free(m);
	if (rc < 0)
		snprintf(err, errlen, "matcher: %s", strerror(-rc));
	return rc < 0 ? rc : 0;
}

/* the receiving side of a hand-over: the arena mapped from its fd, a
 * session's block table received */
static int map_and_recv(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	struct kve_arena_geom g;
	struct kve_arena_kv *view = NULL;
	uint32_t ids[2] = { 0, 1 };
	struct kve_session s = { ids, 2, 7 }, got = { 0 };
	long k = fail_at;
	int fd, sv[2] = { -1, -1 }, rc;

	fail_at = -1;	/* the fd and the socket pair are not under test */
	kve_arena_kv_geom(c->kv, &g);
	fd = kva_arena_data_fd(kve_arena_kv_arena(c->kv), KVA_EXPORT_CLOEXEC);
	rc = fd < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) ? -EIO : 0;
	fail_at = k;
	if (!rc)
		rc = kve_arena_kv_map(c->m, fd, &g, &view, err, errlen);
	if (!rc && !(rc = kve_arena_send_session(sv[0], &s))) {
		rc = kve_arena_recv_session(sv[1], view, &got);
		if (rc)
			snprintf(err, errlen, "recv: %s", strerror(-rc));
		else if (got.n_blocks != 2 || got.block_table[1] != 1 || got.n_tokens != 7)
			rc = -EIO;
		free(got.block_table);
	}
	kve_arena_kv_destroy(view);
	if (fd >= 0)
		close(fd);
	if (sv[0] >= 0) {
		close(sv[0]);
		close(sv[1]);
	}
	return rc;
}

/* text that is not UTF-8: a BPE pre-tokenizer works on a copy with the
 * bad bytes escaped */
static int tokenize_invalid(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	static const char text[] = "caf\xe9 \xff\xfe na\xefve \xc3\xa9t\xc3";
	int32_t ids[64];
	int n = kve_tokenize(c->t, text, sizeof(text) - 1, 0, ids, 64);

	if (n < 0)
		snprintf(err, errlen, "tokenize: %s", strerror(-n));
	return n < 0 ? n : 0;
}

/* Constrained decoding's compilers: a JSON Schema (properties, enum,
 * bounds, a nested object, a real const; nothing free-form, so its automaton has no
 * calls and empty call tables), any JSON object (the free-form
 * containers, reached by call) and tool calls (a free-form argument),
 * each compiled with its k-th allocation failing. One spec per
 * each_failure loop and vocabulary: a compile that succeeded is cached,
 * and a cached spec would shift the next one's allocations, so that its
 * first ones never failed. */
static const char oom_schema[] =
	"{\"type\":\"object\",\"properties\":{\"u\":{\"enum\":[\"c\",\"f\"]},"
	"\"n\":{\"type\":\"integer\",\"minimum\":-3,\"maximum\":250},"
	"\"o\":{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":4}},"
	"\"additionalProperties\":false},\"r\":{\"const\":2.5}},\"required\":[\"u\"],"
	"\"additionalProperties\":false}";
static const char oom_tools[] =
	"[{\"type\":\"function\",\"function\":{\"name\":\"run\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"cmd\":{\"type\":\"string\"},\"opts\":{\"type\":\"object\"}},"
	"\"required\":[\"cmd\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"noargs\"}}]";
static const struct kvc_spec oom_specs[3] = {
	{ .kind = KVC_JSON_SCHEMA, .json = oom_schema, .json_len = sizeof(oom_schema) - 1 },
	{ .kind = KVC_JSON_OBJECT },
	{ .kind = KVC_TOOL_CALLS, .json = oom_tools, .json_len = sizeof(oom_tools) - 1, .max_calls = 2 },
};

static int build_grammar(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	struct kvc_grammar *g = NULL;
	int rc = kvc_compile(c->v, c->spec, &g, err, errlen);

	kvc_grammar_release(g);
	return rc;
}

/* The same with a vocabulary of its own: a compile that succeeds is
 * cached, and the next one would not parse at all. */
static int build_grammar_fresh(void *p, char *err, size_t errlen)
{
	struct ctx *c = p;
	int rc;

	c->v = kvc_vocab_create(c->t, kve_model_info(c->m)->vocab, err, errlen);
	if (!c->v)
		return -ENOMEM;
	rc = build_grammar(c, err, errlen);
	kvc_vocab_free(c->v);
	c->v = NULL;
	return rc;
}

/* How many allocations jansson makes for kvc_compile's three parses and
 * two dumps of a spec, none failing. */
static long jansson_parse_allocs(const struct kvc_spec *spec)
{
	json_t *j;
	char *d = NULL;
	long parse, dump;

	calls = 0;
	fail_at = 1L << 60;	/* count, never fail */
	j = json_loadb(spec->json, spec->json_len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
	parse = calls;
	if (j)
		d = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
	dump = calls - parse;
	fail_at = -1;
	json_decref(j);
	free(d);
	return d ? 3 * parse + 2 * dump : 0;
}

/* Streaming decode of ordinary tokens allocates nothing (its buffer is
 * on the stack up to 512 bytes): counted, none failing. */
static long detok_allocs(struct kve_tokenizer *t)
{
	int32_t ids[64];
	char out[64];
	struct kve_detok d;
	static const char text[] = "Hello, w\xc3\xb6rld: blocks of a session.";
	int n = kve_tokenize(t, text, sizeof(text) - 1, 1, ids, 64), i;
	long used;

	kve_detok_init(&d, t);
	calls = 0;
	fail_at = 1L << 60;	/* count, never fail */
	for (i = 0; i < n; i++)
		kve_detok_push(&d, ids[i], out, sizeof(out));
	used = calls;
	fail_at = -1;
	return n > 0 ? used : -1;
}

/* use_matcher's setup (not under test): the grammar, a mask, the ids
 * of the one-byte tokens */
static void matcher_failures(struct ctx *c, const char *path)
{
	static const struct kvc_spec any = { .kind = KVC_JSON_OBJECT };
	char err[256], b[8];
	int32_t id;
	const char *q;
	int have = 1;
	uint32_t nv = kve_model_info(c->m)->vocab;
	long n;

	c->v = kvc_vocab_create(c->t, nv, err, sizeof(err));
	if (!c->v || kvc_compile(c->v, &any, &c->g, err, sizeof(err))) {
		CHECK(0, "%s: matcher setup: %s", path, err);
		kvc_vocab_free(c->v);
		c->v = NULL;
		return;
	}
	memset(c->byte_tok, 0xff, sizeof(c->byte_tok));
	for (id = 0; id < (int32_t)nv; id++) {
		int k = kve_token_bytes(c->t, id, b, sizeof(b));

		if (k == 1 && b[0] > 0 && c->byte_tok[(int)b[0]] < 0)
			c->byte_tok[(int)b[0]] = id;
	}
	for (q = "{\"a\":["; *q; q++)
		have &= c->byte_tok[(int)*q] >= 0;
	c->mask = calloc(kvc_mask_words(c->v), 4);
	if (c->mask && have) {
		n = each_failure("matcher", use_matcher, c);
		CHECK(n > 0, "%s: a JSON matcher nested to the depth limit and cloned: each of "
		      "%ld allocations failing -> -ENOMEM, nothing leaked", path, n);
	} else {
		CHECK(0, "%s: matcher setup: a mask and one-byte tokens for {\"a\":[", path);
	}
	free(c->mask);
	c->mask = NULL;
	kvc_grammar_release(c->g);
	c->g = NULL;
	kvc_vocab_free(c->v);
	c->v = NULL;
}

/*
 * The two tokenizations above where PCRE2 cannot JIT (a forked child
 * under nojit.h's filter, before this process JIT-compiles anything:
 * PCRE2 would reuse that executable memory): its interpreter allocates
 * frames while it matches, and each of those failing must come out as
 * -ENOMEM too, not as a split that goes on past a failed match. The
 * child reports by its exit status: 0 passed, 1 failed, 2 JIT still on,
 * 3 no pre-tokenizer (SentencePiece), 4 no model, 77 no filter here.
 */
static void tokenize_without_jit(const char *path)
{
	int st = -1;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		struct ctx c = { 0 };
		char err[256];
		long n1, n2;

		if (refuse_exec_memory())
			_exit(77);
		c.m = kve_model_load(path, err, sizeof(err));
		c.t = c.m ? kve_tokenizer_create(c.m, err, sizeof(err)) : NULL;
		if (!c.t)
			_exit(4);
		if (!kve_tokenizer_pretok(c.t))
			_exit(3);
		if (kve_pretok_jit(kve_tokenizer_pretok(c.t)))
			_exit(2);
		n1 = each_failure("tokenize without JIT", tokenize_long, &c);
		n2 = each_failure("tokenize invalid UTF-8 without JIT", tokenize_invalid, &c);
		printf("# %s without JIT: %ld and %ld allocations\n", path, n1, n2);
		fflush(stdout);
		kve_tokenizer_free(c.t);
		kve_model_free(c.m);
		_exit(n1 > 0 && n2 > 0 ? 0 : 1);
	}
	if (pid > 0)
		waitpid(pid, &st, 0);
	if (pid > 0 && WIFEXITED(st) && (WEXITSTATUS(st) == 3 || WEXITSTATUS(st) == 77)) {
		if (WEXITSTATUS(st) == 77)
			printf("# no seccomp filter here: the interpreter's allocations not failed\n");
		return;
	}
	CHECK(pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "%s: without JIT, tokenize a 100-letter word and text that is not UTF-8: each "
	      "allocation failing, the interpreter's frames included -> -ENOMEM (child "
	      "status %d: 1 failed, 2 JIT still on, 4 no model)", path,
	      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

int main(int argc, char **argv)
{
	int i, k;

	json_set_alloc_funcs(jansson_malloc, jansson_free);
	for (i = 1; i < argc; i++)	/* first: nothing JIT-compiled yet */
		tokenize_without_jit(argv[i]);
	{
		long n = each_failure("kernel self-check", run_selfcheck, NULL);

		CHECK(n > 0, "kernel self-check: each of its %ld allocations failing -> out of "
		      "memory, nothing leaked", n);
		n = each_failure("kernel pick", run_pick, NULL);
		CHECK(n > 0, "kernel pick: each of the self-check's %ld allocations failing -> "
		      "no set (out of memory), none given up for it", n);
		{	/* a log with room for one byte: that byte of the line */
			const struct kve_kernels *k;
			char two[2] = "#";

			calls = 0;
			fail_at = 0;
			k = pick_stand(two, 2);
			fail_at = -1;
			CHECK(!k && !strcmp(two, "k"), "kernel pick out of memory, a 2-byte log: "
			      "\"%s\" (the line's first byte)", two);
		}
	}
	for (i = 1; i < argc; i++) {
		struct ctx c = { 0 };
		char err[256];
		size_t len;
		uint8_t *buf = tc_slurp(argv[i], &len);
		long n;

		CHECK(buf != NULL, "read %s", argv[i]);
		if (!buf)
			continue;
		c.file = buf;
		c.len = len;
		n = each_failure("model", build_model, &c);
		CHECK(n > 0, "%s: model from memory: each of %ld allocations failing -> "
		      "out of memory, nothing leaked", argv[i], n);
		c.path = argv[i];
		n = each_failure("model file", build_model, &c);
		CHECK(n > 0, "%s: model from its file: each of %ld allocations failing -> "
		      "out of memory, nothing leaked", argv[i], n);
		c.path = NULL;
		c.m = kve_model_load_mem(buf, len, err, sizeof(err));
		if (!c.m) {
			CHECK(0, "%s: %s", argv[i], err);
			free(buf);
			continue;
		}
		n = each_failure("tokenizer", build_tokenizer, &c);
		CHECK(n > 0, "%s: tokenizer: each of %ld allocations failing -> out of memory",
		      argv[i], n);
		c.t = kve_tokenizer_create(c.m, err, sizeof(err));
		if (c.t) {
			n = detok_allocs(c.t);
			CHECK(n == 0, "%s: streaming decode of short tokens allocates nothing (%ld)",
			      argv[i], n);
			n = each_failure("tokenize", tokenize_long, &c);
			CHECK(n >= 0, "%s: tokenize and stream a 100-letter word: each of %ld "
			      "allocations failing -> -ENOMEM", argv[i], n);
			n = each_failure("tokenize invalid UTF-8", tokenize_invalid, &c);
			CHECK(n >= 0, "%s: tokenize text that is not UTF-8: each of %ld "
			      "allocations failing -> -ENOMEM", argv[i], n);
			n = each_failure("constrained vocabulary", build_vocab, &c);
			CHECK(n > 0, "%s: constrained-decoding vocabulary: each of %ld allocations "
			      "failing -> out of memory, nothing leaked", argv[i], n);
			if (i == 1)
				matcher_failures(&c, argv[i]);
			/* the first model only: about 1000 compiles, 10 s of CPU */
			for (k = 0; i == 1 && k < 3; k++) {
				static const char *const what[3] = { "JSON Schema", "JSON object",
								     "tool calls" };

				c.v = kvc_vocab_create(c.t, kve_model_info(c.m)->vocab, err,
						       sizeof(err));
				CHECK(c.v != NULL, "%s: constrained-decoding vocabulary %s", argv[i],
				      c.v ? "" : err);
				if (!c.v)
					break;
				c.spec = &oom_specs[k];
				n = each_failure(what[k], build_grammar, &c);
				CHECK(n > 0, "%s: %s grammar: each of %ld allocations failing -> "
				      "out of memory, nothing leaked", argv[i], what[k], n);
				kvc_vocab_free(c.v);
			}
			/* the same with jansson's allocations failing (the spec's
			 * parse, a property name's or an enum value's text, a tool
			 * name's): specs with JSON only, a fresh vocabulary each run */
			for (k = 0; i == 1 && k < 3; k += 2) {
				static const char *const what[3] = { "JSON Schema (jansson)", "",
								     "tool calls (jansson)" };

				c.spec = &oom_specs[k];
				jansson_only = 1;
				lenient_below = jansson_parse_allocs(c.spec);
				absorbed = 0;
				n = each_failure(what[k], build_grammar_fresh, &c);
				jansson_only = 0;
				CHECK(lenient_below > 0 && n > lenient_below, "%s: %s grammar: each of "
				      "jansson's %ld allocations failing -> out of memory (those in its "
				      "parses and dumps, %ld: or invalid; %ld absorbed by jansson), "
				      "nothing leaked", argv[i], what[k], n, lenient_below, absorbed);
				lenient_below = 0;
			}
			kve_tokenizer_free(c.t);
		}
		n = each_failure("engine", build_engine, &c);
		CHECK(n > 0, "%s: engine: each of its allocations failing -> out of memory",
		      argv[i]);
		n = each_failure("arena", build_arena, &c);
		CHECK(n > 0, "%s: KV arena and a session: each of %ld allocations failing -> "
		      "an error, nothing held", argv[i], n);
		if (i == 1) {
			struct kve_arena_kv_params ap = { .backend = KVA_BACKEND_MEMFD,
							  .n_blocks = 4, .block_tokens = 4,
							  .dtype = KVE_KV_F32, .name = "oom-map" };

			if (kve_arena_kv_create(c.m, &ap, &c.kv, err, sizeof(err))) {
				CHECK(0, "%s: arena to map: %s", argv[i], err);
			} else {
				n = each_failure("map and receive", map_and_recv, &c);
				CHECK(n > 0, "%s: an arena mapped from its fd and a session received: "
				      "each of %ld allocations failing -> out of memory, nothing "
				      "held", argv[i], n);
				kve_arena_kv_destroy(c.kv);
			}
		}
		kve_model_free(c.m);
		free(buf);
	}
	return tc_done();
}
