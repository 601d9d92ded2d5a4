# SPDX-License-Identifier: GPL-2.0
# kvarena top-level build.
#
#   make                 module (KDIR), libkvarena, tools, tests, kvarenad, kva-mkmodel
#   make demo            the main job, in a QEMU guest (installs what it needs)
#   make check           every test: host suites, both guest kernels, style
#   make bench [BENCH=name]   benchmarks -> build/bench/results.tsv
#   make install [DESTDIR=... PREFIX=/usr/local]
#
# Knobs: KVA_TOOLWAIT=0 builds libkvarena without its eBPF tool-wait part
# (no clang, bpftool or libbpf needed; kva_toolwait_open() then says
# -EOPNOTSUPP).  DEVELOPER=1 (the default in a git checkout) makes
# warnings errors; a release tarball builds with DEVELOPER=0.  CPPFLAGS,
# CFLAGS and LDFLAGS are honoured.
#
# Build outputs go to build/ (the module's objects to kmod/, as Kbuild does).

VERSION := $(shell cat VERSION 2>/dev/null || echo 0.1.0)
SONAME_MAJOR := 0
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
PYTHONDIR ?= $(PREFIX)/lib/python3/dist-packages
DESTDIR ?=

.DEFAULT_GOAL := all
B := build
CC ?= gcc
ifeq ($(origin CC),default)
CC := gcc
endif

# The running kernel's headers if it has them, else Debian's 6.1.
KDIR ?= $(firstword $(wildcard /lib/modules/$(shell uname -r)/build) \
	$(lastword $(sort $(wildcard /lib/modules/6.1.*-amd64/build))))

DEVELOPER ?= $(if $(wildcard .git),1,0)
WARN := -Wall -Wextra $(if $(filter 1,$(DEVELOPER)),-Werror)
KVA_TOOLWAIT ?= 1
CFLAGS_COMMON := $(CPPFLAGS) -std=c11 -D_GNU_SOURCE $(WARN) -g -Iinclude/uapi -Ikmod/core -Ilib \
	-I/usr/include/libnl3
CFLAGS ?= -O2
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

# ---------------------------------------------------------------- library
CORE_SRCS := $(sort $(wildcard kmod/core/*.c))
LIB_SRCS := $(sort $(wildcard lib/*.c))
# lib/toolwait.c (eBPF) or, with KVA_TOOLWAIT=0, its stand-in.
ifeq ($(KVA_TOOLWAIT),0)
LIB_SRCS := $(filter-out lib/toolwait.c,$(LIB_SRCS))
LIB_PC_REQUIRES := liburing libnl-genl-3.0
else
LIB_SRCS := $(filter-out lib/toolwait_none.c,$(LIB_SRCS))
LIB_PC_REQUIRES := liburing libnl-genl-3.0 libbpf
endif
LIB_OBJS := $(patsubst %.c,$(B)/pic/%.o,$(CORE_SRCS) $(LIB_SRCS))
LIB_SO := $(B)/lib/libkvarena.so.$(VERSION)
LIB_A := $(B)/lib/libkvarena.a
LIB_PC := $(B)/lib/kvarena.pc
LIB_LDLIBS := -luring -lnl-genl-3 -lnl-3 -lpthread

$(B)/pic/%.o: %.c $(wildcard include/uapi/linux/*.h kmod/core/*.h lib/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(LIB_SO): $(LIB_OBJS) lib/libkvarena.map
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libkvarena.so.$(SONAME_MAJOR) \
		-Wl,--version-script=lib/libkvarena.map -o $@ $(LIB_OBJS) $(LIB_LDLIBS)
	ln -sf libkvarena.so.$(VERSION) $(B)/lib/libkvarena.so.$(SONAME_MAJOR)
	ln -sf libkvarena.so.$(SONAME_MAJOR) $(B)/lib/libkvarena.so

$(LIB_A): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

PC_SED = sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@REQUIRES_PRIVATE@|$(LIB_PC_REQUIRES)|'
$(LIB_PC): lib/kvarena.pc.in VERSION
	@mkdir -p $(dir $@)
	$(PC_SED) $< > $@

.PHONY: all lib module deps
all: module lib tools tests

lib: $(LIB_SO) $(LIB_A) $(LIB_PC)

deps:
	@scripts/deps.sh check

# ---------------------------------------------------------------- module
module:
	$(MAKE) -C $(KDIR) M=$(CURDIR) modules

# One copy of the module per guest kernel, built out of tree in build/kmod/.
KMOD_SRCS := Kbuild $(wildcard kmod/*.[ch] kmod/core/*.[ch]) include/uapi/linux/kvarena.h
GUEST_KERNELS = $(shell tests/vm/kernels.sh | awk '{print $$2}')

$(B)/kmod/%/kvarena.ko: $(KMOD_SRCS)
	@rm -rf $(B)/kmod/$*/src && mkdir -p $(B)/kmod/$*/src
	cp -r --parents $(KMOD_SRCS) $(B)/kmod/$*/src/
	$(MAKE) -C /lib/modules/$*/build M=$(CURDIR)/$(B)/kmod/$*/src modules 2>&1 | \
		tee $(B)/kmod/$*/build.log
	@! grep -E 'warning:|error:' $(B)/kmod/$*/build.log
	cp $(B)/kmod/$*/src/kvarena.ko $@

.PHONY: modules-guest
modules-guest:
	@for k in $(GUEST_KERNELS); do $(MAKE) --no-print-directory $(B)/kmod/$$k/kvarena.ko || exit 1; done

# ---------------------------------------------------------------- tools and tests
include tools/tools.mk
include tests/tests.mk
-include tests/core/core.mk
-include daemon/engine/engine.mk
-include tools/train/model.mk
-include daemon/chat/chat.mk
-include daemon/api/api.mk
ifneq ($(KVA_TOOLWAIT),0)
-include bpf/bpf.mk
endif
-include tests/debug/debug.mk
# the sandbox before the daemon, which links it
-include daemon/sandbox/sandbox.mk
# KV tiers and the remote room (the daemon links them)
-include daemon/tier/tier.mk
-include daemon/remote/remote.mk
-include daemon/kvarenad/kvarenad.mk
-include tests/daemon/daemon-tests.mk
# the trace replayer's smoke test (after the daemon's test binaries)
-include tools/replay/replay.mk

# what users run (the README's build): the daemon and the model maker too
all: daemon $(ENGINE_MKMODEL)

# ---------------------------------------------------------------- the two commands
.PHONY: demo check bench
demo:
	@scripts/deps.sh demo
	@$(MAKE) --no-print-directory lib tools modules-guest $(ENGINE_MKMODEL) \
		$(KVD_BIN) $(KVD_DEMO_CLIENT)
	tests/demo/run-demo.sh

.PHONY: demo-host
demo-host:
	@scripts/deps.sh build
	@$(MAKE) --no-print-directory lib tools $(ENGINE_MKMODEL) $(KVD_BIN) $(KVD_DEMO_CLIENT)
	tests/demo/run-demo-host.sh

check:
	@scripts/deps.sh check
	@$(MAKE) --no-print-directory check-build
	@$(MAKE) --no-print-directory check-all

BENCH ?=
bench:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory lib tools tests modules-guest
	tools/bench/run-bench.sh $(BENCH)

# ---------------------------------------------------------------- install
INSTALL_MODDIR ?= /lib/modules/$(notdir $(patsubst %/build,%,$(KDIR)))/extra
.PHONY: install
install: lib tools module daemon $(SANDBOX_CLI)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(LIBDIR)/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/kvarena/linux $(DESTDIR)$(PREFIX)/bin \
		$(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man3 \
		$(DESTDIR)$(PREFIX)/share/man/man4 $(DESTDIR)$(PREFIX)/share/man/man8 \
		$(DESTDIR)$(INSTALL_MODDIR) \
		$(DESTDIR)/etc/udev/rules.d
	install -m 0755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf libkvarena.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libkvarena.so.$(SONAME_MAJOR)
	ln -sf libkvarena.so.$(SONAME_MAJOR) $(DESTDIR)$(LIBDIR)/libkvarena.so
	install -m 0644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	$(PC_SED) lib/kvarena.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/kvarena.pc
	install -m 0644 lib/kvarena.h lib/kvarena_toolwait.h $(DESTDIR)$(PREFIX)/include/kvarena/
	install -m 0644 include/uapi/linux/kvarena.h $(DESTDIR)$(PREFIX)/include/kvarena/linux/
	install -m 0755 $(TOOLS_BINS) $(SANDBOX_CLI) $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(KVD_BIN) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(LIBDIR)/kvarenad $(DESTDIR)/etc/systemd/system \
		$(DESTDIR)/etc/kvarena
	install -m 0755 $(KVD_PLUGIN) $(DESTDIR)$(LIBDIR)/kvarenad/
	sed 's|/usr/local/bin|$(PREFIX)/bin|' packaging/kvarenad.service \
		> $(DESTDIR)/etc/systemd/system/kvarenad.service
	[ -f $(DESTDIR)/etc/kvarena/kvarenad.conf ] || \
		install -m 0640 packaging/kvarenad.conf $(DESTDIR)/etc/kvarena/
	install -m 0644 $(wildcard Documentation/man/*.1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 $(wildcard Documentation/man/*.3) $(DESTDIR)$(PREFIX)/share/man/man3/
	install -m 0644 $(wildcard Documentation/man/*.4) $(DESTDIR)$(PREFIX)/share/man/man4/
	install -m 0644 $(wildcard Documentation/man/*.8) $(DESTDIR)$(PREFIX)/share/man/man8/
	install -d $(DESTDIR)$(PYTHONDIR)/kvarena
	install -m 0644 lib/python/kvarena/__init__.py $(DESTDIR)$(PYTHONDIR)/kvarena/
	install -m 0644 kvarena.ko $(DESTDIR)$(INSTALL_MODDIR)/
	install -m 0644 packaging/60-kvarena.rules $(DESTDIR)/etc/udev/rules.d/
	-[ -n "$(DESTDIR)" ] || depmod -a $(notdir $(patsubst %/build,%,$(KDIR)))

.PHONY: clean
clean:
	rm -rf $(B)
	-$(MAKE) -C $(KDIR) M=$(CURDIR) clean >/dev/null 2>&1
