# SPDX-License-Identifier: MIT
# kvarenad.mk - the daemon: orchestrator (daemon/kvarenad), stage worker
# (daemon/worker), shared pieces (daemon/common), the HTTP API (daemon/api,
# its own api.mk) and the CPU engine as a dlopen()-able backend plugin.
# Included from the top-level Makefile after the engine's engine.mk, api.mk
# and sandbox.mk (server-side tools: the orchestrator links libkvsandbox and
# the model families' room, daemon/chat, for tool calls and templates).

KVD_VERSION   := $(VERSION)
KVD_OUT       := $(B)/daemon
KVD_CFLAGS    := -std=c11 -Wall -Wextra -Werror -O2 -g \
                 -fno-strict-aliasing -DKVD_VERSION=\"$(KVD_VERSION)\" \
                 -Idaemon/kvarenad -Idaemon/worker -Idaemon/common -Idaemon/api -Idaemon/chat \
                 -Idaemon/engine -Idaemon/sandbox -Idaemon/tier -Idaemon/remote -Ilib -Iinclude/uapi \
                 -Ikmod/core
KVD_CORE_SRCS := $(filter-out daemon/kvarenad/main.c,$(sort $(wildcard daemon/kvarenad/*.c))) \
                 $(sort $(wildcard daemon/worker/*.c)) \
                 $(filter-out daemon/common/strbuf.c,$(sort $(wildcard daemon/common/*.c))) \
                 $(REMOTE_SRCS)
KVD_HDRS      := $(wildcard daemon/kvarenad/*.h daemon/worker/*.h daemon/common/*.h \
                 daemon/api/*.h daemon/chat/*.h daemon/engine/*.h daemon/sandbox/kvsandbox.h \
                 daemon/sandbox/kvsmcp.h daemon/tier/kvtier.h daemon/remote/*.h) \
                 lib/kvarena.h lib/kvarena_toolwait.h \
                 include/uapi/linux/kvarena.h
KVD_CORE_OBJS := $(KVD_CORE_SRCS:%.c=$(KVD_OUT)/obj/%.o)
KVD_CORE_SOBJS := $(KVD_CORE_SRCS:%.c=$(KVD_OUT)/san/%.o)
KVD_CORE_LIB  := $(KVD_OUT)/libkvd.a
KVD_CORE_SLIB := $(KVD_OUT)/libkvd-san.a
KVD_LDLIBS    := -linih -ldl -lseccomp -ljansson $(ENGINE_LIBS) $(TIER_LIBS) $(LIB_LDLIBS) \
                 $(REMOTE_LIBS)
# what the core library needs besides the engine: the model families
# (daemon/chat, with strbuf), the sandbox and the KV tiers; the API for main.c
KVD_DEP_LIBS  := $(API_LIB) $(CHAT_LIB) $(SANDBOX_LIB) $(TIER_LIB)
KVD_DEP_SLIBS := $(API_SLIB) $(CHAT_SLIB) $(SANDBOX_SLIB) $(TIER_SLIB)
KVD_BIN       := $(B)/bin/kvarenad
KVD_PLUGIN    := $(B)/lib/kvarenad/backend-cpu.so
KVD_SAN       := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                 -fno-omit-frame-pointer

$(KVD_CORE_OBJS): $(KVD_OUT)/obj/%.o: %.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -c $< -o $@

# The sanitized library is test_orch's alone: it carries the test hooks
# (KVD_TEST_HOOKS, sched.c), which the daemon's objects never have.
$(KVD_CORE_SOBJS): $(KVD_OUT)/san/%.o: %.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -O1 $(KVD_SAN) -DKVD_TEST_HOOKS -c $< -o $@

$(KVD_CORE_LIB): $(KVD_CORE_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(KVD_CORE_SLIB): $(KVD_CORE_SOBJS)
	@rm -f $@
	ar rcs $@ $^

# The engine once more as position-independent code, for the plugin.
KVD_ENGINE_PIC := $(filter-out %/kv_arena.o,$(ENGINE_NAMES:%=$(KVD_OUT)/pic/engine/%.o))
$(KVD_ENGINE_PIC): $(KVD_OUT)/pic/engine/%.o: daemon/engine/%.c $(ENGINE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(ENGINE_CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(KVD_PLUGIN): daemon/worker/backend_cpu.c $(KVD_ENGINE_PIC) $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) -fPIC -fvisibility=hidden -DKVD_BACKEND_PLUGIN -shared \
		-Wl,-z,defs daemon/worker/backend_cpu.c $(KVD_ENGINE_PIC) -o $@ $(ENGINE_LIBS)

$(KVD_BIN): daemon/kvarenad/main.c $(KVD_CORE_LIB) $(KVD_DEP_LIBS) $(ENGINE_LIB) $(LIB_A) $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) $< $(KVD_CORE_LIB) $(KVD_DEP_LIBS) $(ENGINE_LIB) $(LIB_A) -o $@ \
		-lsystemd $(API_LIBS) $(KVD_LDLIBS)

.PHONY: daemon
daemon: $(KVD_BIN) $(KVD_PLUGIN)

# make bench BENCH=handoff: the hand-off of one session's KV, arena vs copy
KVD_BENCH_HANDOFF := $(B)/bin/kvd-handoff
$(KVD_BENCH_HANDOFF): tools/bench/daemon/kvd-handoff.c $(KVD_CORE_LIB) $(KVD_DEP_LIBS) $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) $< $(KVD_CORE_LIB) $(KVD_DEP_LIBS) $(LIB_A) -o $@ $(LIB_LDLIBS) \
		-lseccomp -ljansson -linih -lpthread

# make demo's agent client (libcurl, jansson)
KVD_DEMO_CLIENT := $(B)/bin/kvd-demo
$(KVD_DEMO_CLIENT): tools/kvd-demo/kvd-demo.c
	@mkdir -p $(@D)
	$(CC) $(KVD_CFLAGS) $< -o $@ -lcurl -ljansson -lpthread
