# SPDX-License-Identifier: (LGPL-2.1-or-later OR BSD-2-Clause)
# eBPF tool-wait observability (bpf/toolwait.bpf.c) and its tests.
#
#   make bpf                  vmlinux.h, toolwait.bpf.o, toolwait.skel.h in build/bpf/
#   make check-toolwait-host  predictor unit tests + loader test on this host
#                             (memfd backend, USDT, sched tracepoints; root)
#   make check-toolwait-guest the loader test in the 6.1 and 6.12 guests
#                             (module tracepoints)
#   make check-toolwait       both
#
# Included from the top-level Makefile after LIB_LDLIBS and the test rules,
# whose variables it extends.  The skeleton is generated, never committed.

TW_B := $(B)/bpf
TW_VMLINUX := $(TW_B)/vmlinux.h
TW_OBJ := $(TW_B)/toolwait.bpf.o
TW_SKEL := $(TW_B)/toolwait.skel.h
BPF_CLANG ?= $(firstword $(shell command -v clang-14 clang 2>/dev/null))
BPF_STRIP ?= $(firstword $(shell command -v llvm-strip-14 llvm-strip 2>/dev/null))
BPFTOOL ?= $(firstword $(shell command -v bpftool /usr/sbin/bpftool 2>/dev/null))
# The host's BTF; CO-RE relocates against each target kernel's at load.
TW_BTF ?= /sys/kernel/btf/vmlinux
BPF_CFLAGS := -target bpf -g -O2 -Wall -Werror -D__TARGET_ARCH_x86 \
	-I/usr/include/x86_64-linux-gnu -I$(TW_B) -Ibpf

$(TW_VMLINUX):
	@mkdir -p $(dir $@)
	$(BPFTOOL) btf dump file $(TW_BTF) format c > $@.tmp && mv $@.tmp $@

$(TW_OBJ): bpf/toolwait.bpf.c bpf/toolwait.h $(TW_VMLINUX)
	$(BPF_CLANG) $(BPF_CFLAGS) -c $< -o $@
	$(BPF_STRIP) -g $@

$(TW_SKEL): $(TW_OBJ)
	$(BPFTOOL) gen skeleton $< name toolwait_bpf > $@.tmp && mv $@.tmp $@

.PHONY: bpf
bpf: $(TW_SKEL)

# libkvarena's loader (lib/toolwait.c) includes the skeleton and links libbpf.
TW_INC := -I$(TW_B) -Ibpf
TW_LDLIBS := -lbpf -lelf -lz
LIB_LDLIBS += $(TW_LDLIBS)
$(B)/pic/lib/toolwait.o: $(TW_SKEL) bpf/toolwait.h
$(B)/pic/lib/toolwait.o: CFLAGS_COMMON += $(TW_INC)
# tests/lib builds lib/*.c from source: give it the skeleton and libbpf.
$(LT_BIN) $(LT_BIN_VG): $(TW_SKEL)
$(LT_BIN) $(LT_BIN_VG): TEST_CFLAGS += $(TW_INC) -Wl,--no-as-needed $(TW_LDLIBS)

# ---------------------------------------------------------------- tests
TW_TEST_B := $(B)/tests/toolwait
TW_PREDICT_BIN := $(TW_TEST_B)/test_predict
TW_TEST_BIN := $(TW_TEST_B)/test_toolwait
TW_TEST_CFLAGS := $(CFLAGS_COMMON) -O1 $(TW_INC)

$(TW_PREDICT_BIN): tests/toolwait/test_predict.c kmod/core/kvc_predict.c kmod/core/kvc_predict.h
	@mkdir -p $(dir $@)
	$(CC) $(TW_TEST_CFLAGS) $(SAN) tests/toolwait/test_predict.c kmod/core/kvc_predict.c -o $@ -lm

# No ASan here: the binary also runs in the guests, where ASan's shadow
# mappings do not fit the 1 GiB guest next to the arena; libbpf is fine
# under UBSan.  It carries `kvactl toolwait` (test_toolwait kvactl ARGS).
$(TW_TEST_BIN): tests/toolwait/test_toolwait.c tools/kvactl/toolwait.c \
		tools/kvactl/toolwait.h $(LIB_A) lib/kvarena_toolwait.h
	@mkdir -p $(dir $@)
	$(CC) $(TW_TEST_CFLAGS) -Itools/kvactl -fsanitize=undefined \
		-fno-sanitize-recover=all tests/toolwait/test_toolwait.c \
		tools/kvactl/toolwait.c -o $@ $(LIB_A) $(LIB_LDLIBS) -ljansson

.PHONY: check-toolwait check-toolwait-host check-toolwait-guest check-toolwait-predict
check-toolwait-predict: $(TW_PREDICT_BIN)
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 ./$(TW_PREDICT_BIN)

check-toolwait-host: check-toolwait-predict $(TW_TEST_BIN)
	tests/toolwait/run-host.sh

check-toolwait-guest: modules-guest $(TW_TEST_BIN)
	@for k in $(GUEST_KERNELS); do tests/toolwait/run-guest.sh $$k || exit 1; done

check-toolwait:
	$(MAKE) --no-print-directory check-toolwait-host
	$(MAKE) --no-print-directory check-toolwait-guest
