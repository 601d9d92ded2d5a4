# SPDX-License-Identifier: MIT
# remote.mk - kvarenad beyond one machine (daemon/remote/): the UCX
# arena-to-arena transfer engine, the authenticated control channel, the
# KV event publisher (ZeroMQ + msgpack), the orchestrator's link process
# for a remote worker and the remote host's side (`--worker-of`).
# Included from the top-level Makefile before kvarenad.mk, which links it.
#
#   REMOTE_LIB / REMOTE_SLIB   the room as a static library (plain / ASan+UBSan);
#                              link with $(REMOTE_LIBS)
#   check-remote               its tests (root: two network namespaces)

REMOTE_OUT    := $(B)/remote
REMOTE_CFLAGS := -std=c11 -Wall -Wextra -Werror -O2 -g -fno-strict-aliasing \
                 -Idaemon/remote -Idaemon/worker -Idaemon/common -Idaemon/kvarenad -Idaemon/chat \
                 -Idaemon/engine -Ilib -Iinclude/uapi -Ikmod/core
REMOTE_SAN    := -O1 -fsanitize=address,undefined -fno-sanitize-recover=all \
                 -fno-omit-frame-pointer
REMOTE_LIBS   := -lucp -luct -lucs -lzmq -lmsgpackc -lssl -lcrypto
REMOTE_SRCS   := $(sort $(wildcard daemon/remote/*.c))
REMOTE_HDRS   := $(wildcard daemon/remote/*.h) daemon/worker/proto.h daemon/common/log.h
REMOTE_OBJS   := $(REMOTE_SRCS:%.c=$(REMOTE_OUT)/obj/%.o)
REMOTE_SOBJS  := $(REMOTE_SRCS:%.c=$(REMOTE_OUT)/san/%.o)
REMOTE_LIB    := $(REMOTE_OUT)/libkvremote.a
REMOTE_SLIB   := $(REMOTE_OUT)/libkvremote-san.a

$(REMOTE_OBJS): $(REMOTE_OUT)/obj/%.o: %.c $(REMOTE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(REMOTE_CFLAGS) -c $< -o $@

$(REMOTE_SOBJS): $(REMOTE_OUT)/san/%.o: %.c $(REMOTE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(REMOTE_CFLAGS) $(REMOTE_SAN) -c $< -o $@

$(REMOTE_LIB): $(REMOTE_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(REMOTE_SLIB): $(REMOTE_SOBJS)
	@rm -f $@
	ar rcs $@ $^

# tests: the transfer engine across two namespaces
REMOTE_TEST_XFER := $(REMOTE_OUT)/tests/test_xfer
$(REMOTE_TEST_XFER): tests/remote/test_xfer.c $(REMOTE_SLIB) daemon/worker/proto.c $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(REMOTE_CFLAGS) $(REMOTE_SAN) $< daemon/worker/proto.c $(REMOTE_SLIB) $(LIB_A) \
		-o $@ $(REMOTE_LIBS) $(LIB_LDLIBS)

# the same, unsanitized, for the Soft-RoCE lane in a TCG guest
REMOTE_TEST_XFER_PLAIN := $(REMOTE_OUT)/tests/test_xfer_plain
$(REMOTE_TEST_XFER_PLAIN): tests/remote/test_xfer.c $(REMOTE_LIB) daemon/worker/proto.c $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(REMOTE_CFLAGS) $< daemon/worker/proto.c $(REMOTE_LIB) $(LIB_A) -o $@ \
		$(REMOTE_LIBS) $(LIB_LDLIBS)

# make check-remote-rxe: UCX over a verbs transport (rdma_rxe) in each guest
# kernel, both arenas on kvarena.ko
.PHONY: check-remote-rxe
check-remote-rxe: modules-guest $(REMOTE_TEST_XFER_PLAIN)
	@for k in $(GUEST_KERNELS); do \
		tests/remote/run-rxe-guest.sh $$k kernel kernel || exit 1; done

# the authenticated control channel, on loopback
REMOTE_TEST_CHAN := $(REMOTE_OUT)/tests/test_chan
$(REMOTE_TEST_CHAN): tests/remote/test_chan.c $(REMOTE_SLIB)
	@mkdir -p $(@D)
	$(CC) $(REMOTE_CFLAGS) $(REMOTE_SAN) $< $(REMOTE_SLIB) -o $@ $(REMOTE_LIBS)

# the KV event publisher against a real ZeroMQ subscriber
REMOTE_TEST_EVENTS := $(REMOTE_OUT)/tests/test_kvevents
$(REMOTE_TEST_EVENTS): tests/remote/test_kvevents.c tests/remote/subproc.h $(REMOTE_SLIB)
	@mkdir -p $(@D)
	$(CC) $(REMOTE_CFLAGS) $(REMOTE_SAN) -Itests/remote $< $(REMOTE_SLIB) -o $@ \
		$(REMOTE_LIBS) -ljansson -lpthread

# kvarenad on two hosts (network namespaces): the daemon, its test-hook
# build for B (KVR_TEST_STALL_MS), the orchestrator's test model and another
REMOTE_OTHER_MODEL := $(REMOTE_OUT)/tests/other.gguf
$(REMOTE_OTHER_MODEL): $(ENGINE_MKMODEL)
	@mkdir -p $(@D)
	$(ENGINE_MKMODEL) --dim 256 --layers 4 --heads 4 --kv-heads 2 --ffn 512 \
		--vocab 512 --ctx 1024 --tokenizer bpe --type f32 --seed 5 -o $@ >/dev/null

.PHONY: remote check-remote
remote: $(REMOTE_LIB) $(REMOTE_SLIB) $(REMOTE_TEST_XFER) $(REMOTE_TEST_CHAN) \
	$(REMOTE_TEST_EVENTS)

# (the daemon's binaries and test model are its prerequisites too, named
# in tests/daemon/daemon-tests.mk: they are defined after this file)
check-remote: $(REMOTE_TEST_XFER) $(REMOTE_TEST_CHAN) $(REMOTE_TEST_EVENTS) $(REMOTE_OTHER_MODEL)
	$(REMOTE_TEST_CHAN)
	$(REMOTE_TEST_EVENTS) tests/remote/kv_subscriber.py
	tests/remote/run-xfer.sh $(REMOTE_TEST_XFER)
	tests/remote/run-remote.sh $(KVD_BIN) $(KVD_HOOKS_BIN) $(KVD_TEST_MODEL) $(REMOTE_OTHER_MODEL)

# make bench BENCH=remote: the transfer engine against ucx_perftest
REMOTE_BENCH := $(B)/bin/kvr-bench
$(REMOTE_BENCH): tools/bench/remote/kvr-bench.c $(REMOTE_LIB) daemon/worker/proto.c $(LIB_A)
	@mkdir -p $(@D)
	$(CC) $(REMOTE_CFLAGS) $< daemon/worker/proto.c $(REMOTE_LIB) $(LIB_A) -o $@ \
		$(REMOTE_LIBS) $(LIB_LDLIBS)
