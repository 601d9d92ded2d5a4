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
	$(CC) $(TEST_CFLAGS) $(KT_SRCS) -o $@ $(LIB_A) -lcunit $(LIB_LDLIBS)

# Host suite for libkvarena (memfd backend), with sanitizers and without
# (the latter for valgrind).
LT_SRCS := $(sort $(wildcard tests/lib/*.c))
LT_BIN := $(B)/tests/lib/test_lib
LT_BIN_VG := $(B)/tests/lib/test_lib_vg
LIB_ALL_SRCS := $(CORE_SRCS) $(LIB_SRCS)

$(LT_BIN): $(LT_SRCS) $(LIB_ALL_SRCS) $(wildcard lib/*.h kmod/core/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $(SAN) $(LT_SRCS) $(LIB_ALL_SRCS) -o $@ -lcunit $(LIB_LDLIBS)

$(LT_BIN_VG): $(LT_SRCS) $(LIB_ALL_SRCS) $(wildcard lib/*.h kmod/core/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $(LT_SRCS) $(LIB_ALL_SRCS) -o $@ -lcunit $(LIB_LDLIBS)

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

check-all:
	$(MAKE) --no-print-directory check-core
	$(MAKE) --no-print-directory check-lib
	$(MAKE) --no-print-directory check-lib-valgrind
	$(MAKE) --no-print-directory check-style
	$(MAKE) --no-print-directory check-guest
	$(MAKE) --no-print-directory check-dkms
	$(MAKE) --no-print-directory check-install
	$(MAKE) --no-print-directory check-engine
	$(MAKE) --no-print-directory check-engine-guest
	$(MAKE) --no-print-directory check-engine-avx512
	$(MAKE) --no-print-directory check-toolwait
	$(MAKE) --no-print-directory check-fuzz

# make install into a scratch DESTDIR, then build and run a program against
# it through pkg-config, as a user of the installed library would.
INST := $(CURDIR)/$(B)/install-test
check-install: lib tools module
	rm -rf $(INST)
	$(MAKE) --no-print-directory install DESTDIR=$(INST) PREFIX=/usr >/dev/null
	$(CC) -std=c11 -Wall -Wextra -Werror tests/install/example.c -o $(INST)/example \
		$$(PKG_CONFIG_PATH=$(INST)/usr/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$(INST) \
		   pkg-config --cflags --libs kvarena)
	LD_LIBRARY_PATH=$(INST)/usr/lib $(INST)/example
	test -f $(INST)/etc/udev/rules.d/60-kvarena.rules
	ls $(INST)/lib/modules/*/extra/kvarena.ko $(INST)/usr/share/man/man3/libkvarena.3 >/dev/null
	@echo "check-install: ok"

# Mutation testing (Documentation/testing.md, "Mutation lane"); not part of
# check-all: minutes per group. MUTATION_ARGS="--seed 7 -n 40 --groups core"
MUTATION_ARGS ?=
.PHONY: check-mutation
check-mutation:
	nice -n 15 /usr/bin/python3 tests/mutation/mutate.py $(MUTATION_ARGS)
