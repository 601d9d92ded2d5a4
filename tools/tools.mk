# SPDX-License-Identifier: MIT
# Tools: kva-share (the demo), kvactl (operators), benchmark drivers.
TOOLS_BINS := $(B)/bin/kva-share

$(B)/bin/%: tools/%.c $(LIB_A) lib/kvarena.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $(LDFLAGS) $< -o $@ $(LIB_A) $(LIB_LDLIBS)

.PHONY: tools
tools: $(TOOLS_BINS)

BENCH_BINS := $(B)/bin/kva-bench-blocks
$(B)/bin/kva-bench-blocks: tools/bench/kva-bench-blocks.c $(LIB_A) lib/kvarena.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $(LDFLAGS) $< -o $@ $(LIB_A) $(LIB_LDLIBS)
tools: $(BENCH_BINS)

# kvactl: the operator CLI (tools/kvactl/*.c).
KVACTL_SRCS := $(sort $(wildcard tools/kvactl/*.c))
TOOLS_BINS += $(B)/bin/kvactl
$(B)/bin/kvactl: $(KVACTL_SRCS) $(wildcard tools/kvactl/*.h) $(LIB_A) lib/kvarena.h VERSION
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) -Itools/kvactl -DKVACTL_VERSION='"$(VERSION)"' \
		$(LDFLAGS) $(KVACTL_SRCS) -o $@ $(LIB_A) $(LIB_LDLIBS) -ljansson
tools: $(B)/bin/kvactl
