# SPDX-License-Identifier: MIT
# The daemon's tests: the orchestrator end to end without HTTP
# (test_orch: real workers, engine and arena), under ASan/UBSan.
KVD_TEST_ORCH  := $(KVD_OUT)/tests/test_orch
KVD_TEST_MODEL := $(KVD_OUT)/tests/orch-bpe.gguf
# test_orch's spm_turns: the same shape with a SentencePiece tokenizer
KVD_TEST_SPM_MODEL := $(KVD_OUT)/tests/orch-spm.gguf

$(KVD_TEST_ORCH): tests/daemon/test_orch.c $(KVD_CORE_SLIB) $(KVD_DEP_SLIBS) $(ENGINE_SLIB) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O1 $(KVD_SAN) -DKVD_TEST_HOOKS $< $(KVD_CORE_SLIB) $(KVD_DEP_SLIBS) \
		$(ENGINE_SLIB) $(LIB_A) -o $@ $(KVD_LDLIBS)

$(KVD_TEST_MODEL): $(ENGINE_MKMODEL)
	@mkdir -p $(@D)
	$(ENGINE_MKMODEL) --dim 256 --layers 4 --heads 4 --kv-heads 2 --ffn 512 \
		--vocab 512 --ctx 1024 --tokenizer bpe --type f32 --seed 3 -o $@ >/dev/null

$(KVD_TEST_SPM_MODEL): $(ENGINE_MKMODEL)
	@mkdir -p $(@D)
	$(ENGINE_MKMODEL) --dim 256 --layers 4 --heads 4 --kv-heads 2 --ffn 512 \
		--vocab 512 --ctx 1024 --tokenizer spm --type f32 --seed 3 -o $@ >/dev/null

# test_orch and test_tiering run as this many processes side by side
# (tests/daemon/shards.sh; 1: one process, in order)
KVD_TEST_SHARDS ?= 3

# mcp_servers: the npm MCP servers (sandbox-npm) and the hostile fake;
# escape: the escape suite's probe (kvs-probe) through the daemon's tools
.PHONY: check-orch
check-orch: $(KVD_TEST_ORCH) $(KVD_TEST_MODEL) $(KVD_TEST_SPM_MODEL) $(KVD_PLUGIN) $(SANDBOX_FAKE) $(SANDBOX_PROBE) \
	sandbox-npm
	ASAN_OPTIONS=detect_leaks=1 KVD_TEST_MCP_FAKE=$(SANDBOX_FAKE) KVD_TEST_PROBE=$(SANDBOX_PROBE) \
		KVD_TEST_MCP_NPM=$(SANDBOX_OUT)/npm \
		tests/daemon/shards.sh $(KVD_TEST_SHARDS) $(KVD_TEST_ORCH) $(KVD_TEST_MODEL) $(KVD_PLUGIN)

# The KV tiers end to end (daemon/kvarenad/tiering.c over daemon/tier/):
# spill and restore bit-identical, prefetch before a known return,
# corrupted and truncated spill files recomputed, the disk cap, an
# overrunning tool, kvarenad SIGKILLed mid-spill (about 1 min).
KVD_TEST_TIER := $(KVD_OUT)/tests/test_tiering
$(KVD_TEST_TIER): tests/daemon/test_tiering.c $(KVD_CORE_SLIB) $(KVD_DEP_SLIBS) $(ENGINE_SLIB) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O1 $(KVD_SAN) -DKVD_TEST_HOOKS $< $(KVD_CORE_SLIB) $(KVD_DEP_SLIBS) \
		$(ENGINE_SLIB) $(LIB_A) -o $@ $(KVD_LDLIBS)

.PHONY: check-tiering
check-tiering: $(KVD_TEST_TIER) $(KVD_TEST_MODEL)
	ASAN_OPTIONS=detect_leaks=1 tests/daemon/shards.sh $(KVD_TEST_SHARDS) $(KVD_TEST_TIER) \
		$(KVD_TEST_MODEL) $(KVD_OUT)/tests/tiering
	KVD_TEST_KV_DTYPE=q8_0 KVD_TEST_ONLY="spill_restore corrupt make_room shared_prefix" \
		$(KVD_TEST_TIER) $(KVD_TEST_MODEL) $(KVD_OUT)/tests/tiering-q8
	KVD_TEST_ONLY=idle1000 $(KVD_TEST_TIER_G) $(KVD_TEST_MODEL) $(KVD_OUT)/tests/tiering

# In the guests: the same orchestrator over kvarena.ko (dma-buf hand-off,
# io_uring state batches, the kernel's pressure events), without
# sanitizers (TCG is slow enough), then every pinned byte must be back.
KVD_TEST_ORCH_G := $(KVD_OUT)/tests/test_orch_guest
$(KVD_TEST_ORCH_G): tests/daemon/test_orch.c $(KVD_CORE_LIB) $(KVD_DEP_LIBS) $(ENGINE_LIB) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) $< $(KVD_CORE_LIB) $(KVD_DEP_LIBS) $(ENGINE_LIB) $(LIB_A) -o $@ \
		$(KVD_LDLIBS)

.PHONY: check-orch-guest
check-orch-guest: modules-guest $(KVD_TEST_ORCH_G) $(ENGINE_MKMODEL)
	@for k in $(GUEST_KERNELS); do \
		tests/daemon/run-guest-orch.sh $$k || exit 1; done

# The real kvarenad over HTTP: test_serve.py (turns, prefix sharing,
# streaming, budgets, reload, a killed worker, drain, copy mode, the
# plugin, the listen policy), then the HTTP suites (bad input, 1000
# connections, slow clients), mutated requests as each model family (30
# s, api_fuzz.py) and the official openai client against it.
.PHONY: check-serve check-daemon
check-serve: $(KVD_BIN) $(KVD_PLUGIN) $(KVD_TEST_MODEL) $(SANDBOX_FAKE)
	KVD_TEST_MCP_FAKE=$(SANDBOX_FAKE) /usr/bin/python3 tests/daemon/test_serve.py $(KVD_BIN) $(KVD_TEST_MODEL) $(KVD_PLUGIN)
	/usr/bin/python3 tests/daemon/api_fuzz.py --kvarenad $(KVD_BIN) $(KVD_TEST_MODEL) 30
	KVD_API_MODEL=test \
	KVD_API_SERVER_CMD="tests/daemon/kvarenad-for-suite.sh $(KVD_BIN) $(KVD_TEST_MODEL) {port} {keys}" \
		sh tests/daemon/run-api.sh

check-daemon: check-radix check-sched-oom check-orch check-tiering check-serve check-orch-guest check-tier-guest check-replay

# kvarenad with the test hooks (sched.c: a scripted reply read from
# $KVD_TEST_REPLY_FILE), unsanitized (TCG): the sandbox's guest lane starts
# it and drives the escape suite's cgroup-limit cases through its HTTP API
# and agent loop (tests/sandbox/guest-daemon.sh). Never installed.
KVD_CORE_HOBJS := $(KVD_CORE_SRCS:%.c=$(KVD_OUT)/hooks/%.o)
KVD_CORE_HLIB  := $(KVD_OUT)/libkvd-hooks.a
KVD_HOOKS_BIN  := $(KVD_OUT)/tests/kvarenad-hooks
KVD_SBX_MODEL  := $(KVD_OUT)/tests/sandbox-guest.gguf

$(KVD_CORE_HOBJS): $(KVD_OUT)/hooks/%.o: %.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -DKVD_TEST_HOOKS -c $< -o $@

$(KVD_CORE_HLIB): $(KVD_CORE_HOBJS)
	@rm -f $@
	ar rcs $@ $^

$(KVD_HOOKS_BIN): daemon/kvarenad/main.c $(KVD_CORE_HLIB) $(KVD_DEP_LIBS) $(ENGINE_LIB) $(LIB_A) \
	$(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -DKVD_TEST_HOOKS $< $(KVD_CORE_HLIB) $(KVD_DEP_LIBS) $(ENGINE_LIB) \
		$(LIB_A) -o $@ -lsystemd $(API_LIBS) $(KVD_LDLIBS)

# small enough for TCG
$(KVD_SBX_MODEL): $(ENGINE_MKMODEL)
	@mkdir -p $(@D)
	$(ENGINE_MKMODEL) --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 \
		--ctx 2048 --tokenizer bpe --type f32 --seed 3 -o $@ >/dev/null

# sandbox.mk's guest lane (included before this file) runs the daemon too
check-sandbox-guest: $(KVD_HOOKS_BIN) $(KVD_SBX_MODEL)

# The scheduler's allocations failing one by one (conv.c's pieces and
# appends, radix.c), ASan's leak check on (tests/daemon/test_sched_oom.c)
KVD_TEST_SCHED_OOM := $(KVD_OUT)/tests/test_sched_oom
$(KVD_TEST_SCHED_OOM): tests/daemon/test_sched_oom.c $(KVD_CORE_SLIB) $(KVD_DEP_SLIBS) $(ENGINE_SLIB) \
		$(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O1 $(KVD_SAN) -DKVD_TEST_HOOKS $< $(KVD_CORE_SLIB) $(KVD_DEP_SLIBS) \
		$(ENGINE_SLIB) $(LIB_A) -o $@ $(KVD_LDLIBS) -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc

.PHONY: check-sched-oom
check-sched-oom: $(KVD_TEST_SCHED_OOM) $(KVD_TEST_MODEL) $(KVD_TEST_SPM_MODEL)
	ASAN_OPTIONS=detect_leaks=1 $(KVD_TEST_SCHED_OOM) $(KVD_TEST_MODEL) $(KVD_TEST_SPM_MODEL)

# check-remote (daemon/remote/remote.mk, read before the daemon's makefiles,
# where these were still empty): kvarenad on two hosts needs them built
check-remote: $(KVD_BIN) $(KVD_HOOKS_BIN) $(KVD_TEST_MODEL)

# The radix index against a brute-force model (property test, ASan/UBSan)
KVD_TEST_RADIX := $(KVD_OUT)/tests/test_radix
$(KVD_TEST_RADIX): tests/daemon/test_radix.c $(KVD_CORE_SLIB)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O1 $(KVD_SAN) $< $(KVD_CORE_SLIB) -o $@

.PHONY: check-radix
check-radix: $(KVD_TEST_RADIX)
	$(KVD_TEST_RADIX) $$(date +%s) 20000
# The same over kvarena.ko in both guest kernels (the tier on the module's
# mapping: O_DIRECT where the guest's tmpfs has it, 6.6+), then every
# pinned byte back and the module unloaded.
KVD_TEST_TIER_G := $(KVD_OUT)/tests/test_tiering_guest
$(KVD_TEST_TIER_G): tests/daemon/test_tiering.c $(KVD_CORE_HLIB) $(KVD_DEP_LIBS) $(ENGINE_LIB) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -DKVD_TEST_HOOKS $< $(KVD_CORE_HLIB) $(KVD_DEP_LIBS) $(ENGINE_LIB) \
		$(LIB_A) -o $@ $(KVD_LDLIBS)
# unsanitized on the host too: the 1000 idle conversations' memory bound
# (ASan's redzones and quarantine are not the daemon's memory)
check-tiering: $(KVD_TEST_TIER_G)

.PHONY: check-tier-guest
check-tier-guest: modules-guest $(KVD_TEST_TIER_G) $(TIER_TEST_G) $(ENGINE_MKMODEL)
	@for k in $(GUEST_KERNELS); do \
		tests/daemon/run-guest-tier.sh $$k || exit 1; done

# The clients people use (npm: openai, @openai/agents, @anthropic-ai/sdk,
# the Codex CLI, Claude Code; about 1 GiB, pinned, installed once into
# build/clients/node) against the real kvarenad through a recording
# proxy; not in make check (the download, and the CLIs' 20-35k-token
# prompts take minutes to prefill here), CI runs it
# (Documentation/testing.md).
.PHONY: check-clients
check-clients: $(KVD_BIN) $(ENGINE_MKMODEL) $(API_SERVER)
	sh tests/daemon/clients/run-clients.sh $(KVD_BIN) $(ENGINE_MKMODEL) $(API_SERVER)

# The mutation lane's coverage (tests/mutation/mutate.py, sched group):
# test_orch, test_tiering, test_radix and test_sched_oom once more with gcov's line
# counters in the core objects KVD_COV_SRCS names (the lane passes its
# group's files; -O0, so a line's count is that line's), run part by part
# to learn which tests reach which lines; never run by make check.
KVD_COV_SRCS   ?= $(KVD_CORE_SRCS)
KVD_CORE_COBJS := $(KVD_COV_SRCS:%.c=$(KVD_OUT)/cov/%.o)
KVD_CORE_CLIB  := $(KVD_OUT)/libkvd-cov.a
KVD_TEST_ORCH_COV  := $(KVD_OUT)/tests/test_orch_cov
KVD_TEST_RADIX_COV := $(KVD_OUT)/tests/test_radix_cov
KVD_TEST_TIER_COV  := $(KVD_OUT)/tests/test_tiering_cov
KVD_TEST_SCHED_OOM_COV := $(KVD_OUT)/tests/test_sched_oom_cov

$(KVD_CORE_COBJS): $(KVD_OUT)/cov/%.o: %.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O0 --coverage $(KVD_SAN) -DKVD_TEST_HOOKS -c $< -o $@

$(KVD_CORE_CLIB): $(KVD_CORE_COBJS) $(filter-out $(KVD_COV_SRCS:%.c=$(KVD_OUT)/san/%.o),\
		$(KVD_CORE_SOBJS))
	@rm -f $@
	ar rcs $@ $^

$(KVD_TEST_ORCH_COV): tests/daemon/test_orch.c $(KVD_CORE_CLIB) $(KVD_DEP_SLIBS) $(ENGINE_SLIB) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O1 $(KVD_SAN) -DKVD_TEST_HOOKS --coverage $< $(KVD_CORE_CLIB) \
		$(KVD_DEP_SLIBS) $(ENGINE_SLIB) $(LIB_A) -o $@ $(KVD_LDLIBS)

$(KVD_TEST_TIER_COV): tests/daemon/test_tiering.c $(KVD_CORE_CLIB) $(KVD_DEP_SLIBS) $(ENGINE_SLIB) \
		$(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O1 $(KVD_SAN) -DKVD_TEST_HOOKS --coverage $< $(KVD_CORE_CLIB) \
		$(KVD_DEP_SLIBS) $(ENGINE_SLIB) $(LIB_A) -o $@ $(KVD_LDLIBS)

$(KVD_TEST_RADIX_COV): tests/daemon/test_radix.c $(KVD_CORE_CLIB)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O1 $(KVD_SAN) --coverage $< $(KVD_CORE_CLIB) -o $@

$(KVD_TEST_SCHED_OOM_COV): tests/daemon/test_sched_oom.c $(KVD_CORE_CLIB) $(KVD_DEP_SLIBS) \
		$(ENGINE_SLIB) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O1 $(KVD_SAN) -DKVD_TEST_HOOKS --coverage $< $(KVD_CORE_CLIB) \
		$(KVD_DEP_SLIBS) $(ENGINE_SLIB) $(LIB_A) -o $@ $(KVD_LDLIBS) \
		-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc

# The suites' own headers (test_hold.h, test_run.h, test_worker.h)
KVD_TEST_HDRS := $(wildcard tests/daemon/test_*.h)
$(KVD_TEST_ORCH) $(KVD_TEST_ORCH_G) $(KVD_TEST_ORCH_COV) $(KVD_TEST_TIER) $(KVD_TEST_TIER_G) \
	$(KVD_TEST_TIER_COV) $(KVD_TEST_SCHED_OOM) $(KVD_TEST_SCHED_OOM_COV): $(KVD_TEST_HDRS)
