# SPDX-License-Identifier: GPL-2.0
# Tests.  `make check` runs check-all: host suites (shared core, library)
# under ASan/UBSan and valgrind, module style (checkpatch, sparse), the
# in-guest suite on every guest kernel, dkms, and the engine's suite (on the
# host, over the module in each guest, and its AVX-512 kernels on Bochs's
# emulated Skylake-X).

TEST_CFLAGS := $(CFLAGS_COMMON) -O1
KT_BIN := $(B)/tests/kmod/test_kmod
KT_SRCS := $(sort $(wildcard tests/kmod/*.c))

$(KT_BIN): $(KT_SRCS) tests/kmod/kt.h tests/common/kva_guest.h $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $(KT_SRCS) -o $@ $(LIB_A) -lcunit $(LIB_LDLIBS) -ljansson

# Host suite for libkvarena (memfd backend), with sanitizers and without
# (the latter for valgrind).
LT_SRCS := $(sort $(wildcard tests/lib/*.c))
LT_BIN := $(B)/tests/lib/test_lib
LT_BIN_VG := $(B)/tests/lib/test_lib_vg
LIB_ALL_SRCS := $(CORE_SRCS) $(LIB_SRCS)

$(LT_BIN) $(LT_BIN_VG): TEST_CFLAGS += -DKVA_TEST_VERSION='"$(VERSION)"'
$(LT_BIN): $(LT_SRCS) $(LIB_ALL_SRCS) $(wildcard lib/*.h kmod/core/*.h) VERSION
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $(SAN) $(LT_SRCS) $(LIB_ALL_SRCS) -o $@ -lcunit $(LIB_LDLIBS)

$(LT_BIN_VG): $(LT_SRCS) $(LIB_ALL_SRCS) $(wildcard lib/*.h kmod/core/*.h) VERSION
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $(LT_SRCS) $(LIB_ALL_SRCS) -o $@ -lcunit $(LIB_LDLIBS)

.PHONY: check-spdx
# Every source file's SPDX tag, from the set allowed in its directory.
check-spdx:
	scripts/check-spdx.sh

.PHONY: check-kvactl check-man
# kvactl on the host without the module: help, usage errors, its JSON
# schema and kvactl(8) (the listings run in the guest suite).
KVACTL_DELTA_BIN := $(B)/tests/kvactl/test_delta
$(KVACTL_DELTA_BIN): tests/kvactl/test_delta.c tools/kvactl/toolwait.c tools/kvactl/toolwait.h $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $(SAN) -Itools/kvactl tests/kvactl/test_delta.c \
		tools/kvactl/toolwait.c -o $@ $(LIB_A) $(LIB_LDLIBS) -ljansson
check-kvactl: $(B)/bin/kvactl $(KVACTL_DELTA_BIN)
	tests/kvactl/check-host.sh $(B)/bin/kvactl
	./$(KVACTL_DELTA_BIN)

# Every man page lint-clean for mandoc and for groff (man --warnings);
# a .so link must point to a page that exists.
check-man:
	@out=$$(for f in Documentation/man/*.[1-8]; do \
		if head -1 "$$f" | grep -q '^\.so '; then \
			t=Documentation/man/$$(head -1 "$$f" | sed 's|^\.so man[1-8]/||'); \
			[ -f "$$t" ] || echo "$$f: .so to a missing $$t"; continue; \
		fi; \
		mandoc -Tlint "$$f" 2>&1; \
		LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z \
			"$$f" 2>&1 >/dev/null; done); \
	if [ -n "$$out" ]; then echo "$$out"; exit 1; fi; \
	echo "check-man: $$(ls Documentation/man/*.[1-8] | wc -l) pages lint-clean"

.PHONY: check-config-docs
# Every key config.c reads is in packaging/kvarenad.conf, daemon.md's
# table and kvarenad(8), and the example's defaults are the defaults.
check-config-docs:
	python3 tests/daemon/check_config_docs.py

.PHONY: check-python
# The Python binding (lib/python, ctypes) on the memfd backend, with
# Debian's python3 and numpy, against the library built here.
check-python: $(LIB_SO)
	KVARENA_LIB=$(CURDIR)/$(B)/lib/libkvarena.so.$(SONAME_MAJOR) PYTHONPATH=lib/python \
		/usr/bin/python3 -m unittest discover -s lib/python/tests -v

.PHONY: check-lib-docs
# Exported symbols = version script = headers = library.md = man pages.
# The same suite on the kernel backend, in a guest per kernel (Debian's
# python3 and numpy packed in; the data fd is then a real dma-buf).
.PHONY: check-python-guest
check-python-guest: modules-guest $(LIB_SO)
	@for k in $(GUEST_KERNELS); do \
		tests/lib/python-guest.sh $$k $(B)/lib/libkvarena.so.$(SONAME_MAJOR) || exit 1; done

check-lib-docs: $(LIB_SO)
	scripts/check-lib-docs.sh $(LIB_SO)

.PHONY: check-abi
# A program built against a deliberately older copy of the headers
# (tests/abi/old/), run against the library built now (memfd backend).
ABI_BIN := $(B)/tests/abi/test_old_header
$(ABI_BIN): tests/abi/test_old_header.c $(wildcard tests/abi/old/kvarena/*.h \
		tests/abi/old/kvarena/linux/*.h) $(LIB_SO)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra -Werror -g -Itests/abi/old $< -o $@ \
		-L$(B)/lib -lkvarena
check-abi: $(ABI_BIN)
	LD_LIBRARY_PATH=$(B)/lib ./$(ABI_BIN)

.PHONY: tests check-all check-lib check-lib-valgrind check-style check-guest \
	check-guest-% check-dkms check-install check-engine-guest
tests: $(KT_BIN) $(LT_BIN)

check-lib: $(LT_BIN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ./$(LT_BIN)

check-lib-valgrind: $(LT_BIN_VG)
	valgrind -q --leak-check=full --show-leak-kinds=definite,indirect,possible \
		--errors-for-leak-kinds=definite,indirect,possible --error-exitcode=9 \
		--child-silent-after-fork=yes ./$(LT_BIN_VG)

# Kernel style: checkpatch --strict (from Debian's linux-source-6.1) and
# sparse (C=2) against every guest kernel's headers.  LINUX_VERSION_CODE is
# ignored: an out-of-tree module's compat.h must compare versions.
CHECKPATCH := $(B)/tools/checkpatch/scripts/checkpatch.pl
$(CHECKPATCH):
	@mkdir -p $(B)/tools/checkpatch
	tar -C $(B)/tools/checkpatch --strip-components=1 -xf \
		$(lastword $(sort $(wildcard /usr/src/linux-source-6.1*.tar.xz))) \
		--wildcards '*/scripts/checkpatch.pl' '*/scripts/spelling.txt' \
		'*/scripts/const_structs.checkpatch'

check-style: $(CHECKPATCH)
	$(CHECKPATCH) --strict --no-tree --quiet --terse --show-types \
		--ignore LINUX_VERSION_CODE \
		-f $(wildcard kmod/*.[ch] kmod/core/*.[ch]) include/uapi/linux/kvarena.h
	@echo "checkpatch --strict: clean"
	tests/kmod/sparse.sh $(GUEST_KERNELS)

check-guest: modules-guest $(KT_BIN) tools
	@for k in $(GUEST_KERNELS); do \
		tests/kmod/run-suite.sh $$k || exit 1; done

# The engine's KV over kvarena.ko (the host's check-engine uses memfd).
check-engine-guest: modules-guest engine
	@for k in $(GUEST_KERNELS); do \
		tests/engine/run-guest-arena.sh $$k || exit 1; done

check-dkms:
	tests/dkms/check-dkms.sh

# What the lanes build most of, built first on every CPU (each lane's own
# make builds what is left, one job at a time): on a fresh clone the
# builds are minutes of make check (a recipe: the variables come from
# makefiles read after this one)
.PHONY: check-build
check-build:
	$(MAKE) --no-print-directory -j$$(nproc) all engine modules-guest $(KT_BIN) \
		$(KVD_BIN) $(KVD_PLUGIN) $(KVD_TEST_ORCH) $(KVD_TEST_ORCH_G) $(KVD_TEST_TIER) \
		$(KVD_TEST_TIER_G) $(KVD_TEST_SCHED_OOM) $(KVD_TEST_RADIX) $(KVD_TEST_MODEL) \
		$(KVD_TEST_SPM_MODEL)

# Every test, in this order; each lane's time is printed as it ends and
# all of them at the end, so that a log (CI's too) says where the time goes.
CHECK_LANES := check-spdx \
	check-man \
	check-config-docs \
	check-lib-docs \
	check-kvactl \
	check-core \
	check-lib \
	check-abi \
	check-lib-valgrind \
	check-python \
	check-style \
	check-guest \
	check-dkms \
	check-install \
	check-engine \
	check-engine-peer \
	check-model \
	check-engine-guest \
	check-python-guest \
	check-engine-avx512 \
	check-toolwait \
	check-fuzz \
	check-chat \
	check-api \
	check-tier \
	check-daemon \
	check-remote \
	check-remote-rxe \
	check-sandbox \
	check-sandbox-guest

check-all:
	@mkdir -p $(B); : > $(B)/check-times; \
	for t in $(CHECK_LANES); do \
		s=$$(date +%s); \
		echo "$(MAKE) --no-print-directory $$t"; \
		$(MAKE) --no-print-directory $$t || { echo "check-all: $$t failed after $$(($$(date +%s) - s)) s"; exit 1; }; \
		echo "$$t $$(($$(date +%s) - s))" >> $(B)/check-times; \
		echo "check-all: $$t took $$(($$(date +%s) - s)) s"; \
	done; \
	echo "check-all: every lane passed; seconds each, longest first:"; \
	sort -k2,2nr $(B)/check-times | awk '{ printf "  %-24s %5d\n", $$1, $$2; s += $$2 } END { printf "  %-24s %5d\n", "total", s }'

# make install into a scratch DESTDIR, then build and run programs against
# it through pkg-config, as a user of the installed library would: one in
# C, one in C++ (and every struct/enum tag named bare from C++).
INST := $(CURDIR)/$(B)/install-test
CXX_STD ?= -std=c++17
INST_PC = PKG_CONFIG_PATH=$(INST)/usr/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$(INST) pkg-config
check-install: lib tools module
	rm -rf $(INST)
	$(MAKE) --no-print-directory install DESTDIR=$(INST) PREFIX=/usr >/dev/null
	$(CC) -std=c11 -Wall -Wextra -Werror tests/install/example.c -o $(INST)/example \
		$$($(INST_PC) --cflags --libs kvarena)
	LD_LIBRARY_PATH=$(INST)/usr/lib $(INST)/example
	$(CXX) $(CXX_STD) -Wall -Wextra -Werror tests/install/example_cxx.cpp \
		-o $(INST)/example_cxx $$($(INST_PC) --cflags --libs kvarena)
	LD_LIBRARY_PATH=$(INST)/usr/lib $(INST)/example_cxx
	tests/install/cxx-tags.sh $(INST)/usr/include > $(INST)/tags.cpp
	$(CXX) $(CXX_STD) -Wall -Wextra -Werror -fsyntax-only $(INST)/tags.cpp \
		$$($(INST_PC) --cflags kvarena)
	! test -e $(INST)/usr/include/linux
	@# pkg-config --static lists everything a static link needs.
	$(CC) -std=c11 -Wall -Wextra -Werror -static tests/install/example.c \
		-o $(INST)/example-static $$($(INST_PC) --cflags --static --libs kvarena) \
		2>&1 | { grep -v 'statically linked applications requires' || true; }
	$(INST)/example-static
	@# Without the tool-wait part: no clang, bpftool or libbpf involved.
	$(MAKE) --no-print-directory B=$(B)/notw KVA_TOOLWAIT=0 DEVELOPER=0 \
		BPF_CLANG=/nonexistent BPFTOOL=/nonexistent lib $(B)/notw/bin/kvactl >/dev/null
	! readelf -d $(B)/notw/lib/libkvarena.so | grep -q libbpf
	! grep -q libbpf $(B)/notw/lib/kvarena.pc
	$(B)/notw/bin/kvactl toolwait 2>&1 | grep -q 'Operation not supported'
	test -f $(INST)/etc/udev/rules.d/60-kvarena.rules
	ls $(INST)/lib/modules/*/extra/kvarena.ko $(INST)/usr/share/man/man3/libkvarena.3 >/dev/null
	ls $(INST)/usr/bin/kva-sandbox $(INST)/usr/share/man/man1/kva-sandbox.1 >/dev/null
	MANWIDTH=80 man -M $(INST)/usr/share/man -P cat kva_recv_fds 2>/dev/null | grep -q 'kva_recv_fds('
	cd / && PYTHONPATH=$(INST)/usr/lib/python3/dist-packages \
		LD_LIBRARY_PATH=$(INST)/usr/lib /usr/bin/python3 -c \
		'import kvarena; print("installed python binding: libkvarena", kvarena.lib_version())'
	@echo "check-install: ok"

# Mutation testing (Documentation/testing.md, "Mutation lane"); not part of
# check-all: minutes per group. MUTATION_ARGS="--seed 7 -n 40 --groups core"
MUTATION_ARGS ?=
.PHONY: check-mutation
check-mutation:
	nice -n 15 /usr/bin/python3 tests/mutation/mutate.py $(MUTATION_ARGS)
