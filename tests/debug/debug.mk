# SPDX-License-Identifier: GPL-2.0
# Kernel hardening lane (included from the top-level Makefile):
#
#   make debug-kernel    Debian's linux-source-6.1 (DEBUG_SERIES=6.12: 6.12) +
#                        tests/debug/kernel.config
#                        (KASAN, lockdep, kmemleak, DEBUG_OBJECTS, fault
#                        injection) built into DEBUG_KERNEL_DIR, once per config
#   make debug-module    kvarena.ko against that tree (KVA_DEBUG_INJECT=uaf|leak|lock
#                        builds a scratch copy with a known bug instead)
#   make check-debug     boot it: the guest suite, kva-fuzz (FUZZ_OPS, or >= 1M
#                        with FUZZ_FULL=1), kva-failnth, kmemleak; fail on any report
#   make check-fuzz      a short kva-fuzz run on every Debian guest kernel (in check-all)
#   make fuzz            build kva-fuzz and kva-failnth only
#
# See Documentation/hardening.md.

# 6.1 by default; DEBUG_SERIES=6.12 for the kernel with IO_URING_F_CANCEL
DEBUG_SERIES ?= 6.1
DEBUG_KERNEL_DIR ?= /var/cache/kvarena/debug-kernel$(if $(filter-out 6.1,$(DEBUG_SERIES)),-$(DEBUG_SERIES))
DEBUG_JOBS ?= 2
FUZZ_FULL ?=
FUZZ_SEED ?= 0x6b7661
ifeq ($(FUZZ_FULL),1)
FUZZ_OPS ?= 1000000
FUZZ_SECS ?= 14400
else
FUZZ_OPS ?= 20000
FUZZ_SECS ?= 600
endif
# The Debian-kernel lane (check-fuzz) has its own, smaller budget.
CHECK_FUZZ_OPS ?= 20000
KVA_DEBUG_INJECT ?=
# kva-failnth scenarios (default: all)
FAILNTH_SCENARIOS ?=
# guest suites (default: all) and extra kva-fuzz options (e.g. -x VGEM)
DEBUG_SUITES ?=
FUZZ_ARGS ?=

FUZZ_BIN := $(B)/tests/fuzz/kva-fuzz
FAILNTH_BIN := $(B)/tests/debug/kva-failnth
DEBUG_KO := $(B)/kmod-debug-$(DEBUG_SERIES)$(if $(KVA_DEBUG_INJECT),-$(KVA_DEBUG_INJECT))/kvarena.ko

$(FUZZ_BIN): tests/fuzz/kva-fuzz.c tests/common/kva_guest.h include/uapi/linux/kvarena.h $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -O2 $< -o $@ $(LIB_A) $(LIB_LDLIBS)

$(FAILNTH_BIN): tests/debug/kva-failnth.c tests/common/kva_guest.h include/uapi/linux/kvarena.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -O2 $< -o $@ -luring

.PHONY: fuzz debug-kernel debug-module check-debug check-fuzz
fuzz: $(FUZZ_BIN) $(FAILNTH_BIN)

debug-kernel:
	@command -v flex >/dev/null && command -v bison >/dev/null || \
		{ [ "$$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		  --no-install-recommends flex bison bc >/dev/null; }
	KVA_DEBUG_SERIES=$(DEBUG_SERIES) tests/debug/build-kernel.sh $(DEBUG_KERNEL_DIR) $(DEBUG_JOBS)

# Out of tree, from a copy of the sources (as modules-guest does); with
# KVA_DEBUG_INJECT, the copy gets a known bug (tests/debug/inject.sh).
debug-module: debug-kernel
	@rm -rf $(dir $(DEBUG_KO))src && mkdir -p $(dir $(DEBUG_KO))src
	cp -r --parents $(KMOD_SRCS) $(dir $(DEBUG_KO))src/
	$(if $(KVA_DEBUG_INJECT),tests/debug/inject.sh $(KVA_DEBUG_INJECT) $(dir $(DEBUG_KO))src)
	nice -n 19 $(MAKE) -C $(DEBUG_KERNEL_DIR)/linux-source-$(DEBUG_SERIES) M=$(CURDIR)/$(dir $(DEBUG_KO))src \
		modules 2>&1 | tee $(dir $(DEBUG_KO))build.log
	@! grep -E 'warning:|error:' $(dir $(DEBUG_KO))build.log
	cp $(dir $(DEBUG_KO))src/kvarena.ko $(DEBUG_KO)

check-debug: debug-module $(KT_BIN) $(FUZZ_BIN) $(FAILNTH_BIN) tools
	DEBUG_KERNEL_DIR=$(DEBUG_KERNEL_DIR) FUZZ_OPS=$(FUZZ_OPS) FUZZ_SECS=$(FUZZ_SECS) \
	FUZZ_SEED=$(FUZZ_SEED) FAILNTH_ARGS="$(FAILNTH_SCENARIOS)" \
	KT_SUITES="$(DEBUG_SUITES)" FUZZ_ARGS="$(FUZZ_ARGS)" tests/debug/check-debug.sh $(DEBUG_KO)

check-fuzz: modules-guest $(FUZZ_BIN)
	@for k in $(GUEST_KERNELS); do \
		FUZZ_OPS=$(CHECK_FUZZ_OPS) FUZZ_SEED=$(FUZZ_SEED) tests/fuzz/run-fuzz.sh $$k || exit 1; done
